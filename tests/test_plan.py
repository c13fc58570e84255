"""The resource plan (`--dry-run`) and every documented flag of the training entry points through the parser."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from mtcore.config import ConfigError, auto_settings, load_yaml
from mtcore.distributed.jobs import TrainingJob
from mtcore.distributed.plan import PlanError, make_plan

ROOT = Path(__file__).resolve().parent.parent


def script(relpath: str):
    spec = importlib.util.spec_from_file_location(Path(relpath).stem.replace("-", "_"), ROOT / relpath)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def documented_commands(entry: str) -> list[list[str]]:
    """Every `python ENTRY ...` line of the README and of the script's own docstring, as argv lists."""
    texts = [(ROOT / "README.md").read_text(encoding="utf-8"), (ROOT / entry).read_text(encoding="utf-8")]
    code = re.search(r"The code is (mtcore/cli/\w+\.py)", texts[1])  # a script that runs mtcore.cli's code
    if code:
        texts.append((ROOT / code.group(1)).read_text(encoding="utf-8"))
    found = []
    for text in texts:
        for m in re.finditer(rf"python {re.escape(entry)}([^`\n|#]*)", text):
            tail = m.group(1).split("'")[0].strip()
            if "[" in tail or "NAME" in tail or "…" in tail or "..." in tail:  # a synopsis, not a command
                continue
            found.append(shlex.split(tail))
    return found


TRAIN_COMMANDS = documented_commands("experiments/train_transformer.py")
TUNE_COMMANDS = documented_commands("experiments/tune_transformer.py")


def test_the_docs_show_the_gpu_flag():
    assert any("--gpu" in argv for argv in TRAIN_COMMANDS), TRAIN_COMMANDS
    assert len(TRAIN_COMMANDS) >= 4 and len(TUNE_COMMANDS) >= 5


@pytest.mark.parametrize("argv", TRAIN_COMMANDS, ids=" ".join)
def test_every_documented_train_command_parses(argv):
    module = script("experiments/train_transformer.py")
    args, overrides = module.parse_args(argv)
    job = TrainingJob.load(args.config, overrides)
    if args.gpu:
        assert job.job.use_gpu == "yes"
    if args.average is not None:
        assert job.run.train.average_last == args.average


def test_auto_on_cpu_averages_checkpoints_and_explicit_keys_win():
    module = script("experiments/train_transformer.py")
    args, overrides = module.parse_args([])
    job = TrainingJob.load(args.config, overrides)  # the default run: preset auto, CPU workers
    assert (job.run.train.average_last, job.run.train.average_every) == (8, 25)  # benchmarks/checkpoint_average.py
    args, overrides = module.parse_args(["--average", "3", "train.average_every=10"])
    job = TrainingJob.load(args.config, overrides)
    assert (job.run.train.average_last, job.run.train.average_every) == (3, 10)


@pytest.mark.parametrize("argv", TUNE_COMMANDS, ids=" ".join)
def test_every_documented_tune_command_parses(argv):
    module = script("experiments/tune_transformer.py")
    args, overrides = module.parse_args(argv)
    if args.search == "optuna":
        pytest.importorskip("optuna")
    module.load_job(args, overrides)


PIPELINES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "pipelines").glob("*.py")) + ["experiments/bt_effect.py"]
PIPELINE_COMMANDS = [(entry, argv) for entry in PIPELINES for argv in documented_commands(entry)]


def test_every_entry_point_has_documented_commands():
    assert {entry for entry, _ in PIPELINE_COMMANDS} == set(PIPELINES)


@pytest.mark.parametrize("entry, argv", PIPELINE_COMMANDS, ids=[f"{e} {' '.join(a)}" for e, a in PIPELINE_COMMANDS])
def test_every_documented_pipeline_command_parses(entry, argv):
    """Each flag the README or the script's docstring shows is one its parser takes, with a value of its type."""
    script(entry).build_parser().parse_args(argv)


README_MTCORE = [shlex.split(m.group(1)) for m in re.finditer(r"^mtcore ([^#\n]+)", (ROOT / "README.md").read_text(encoding="utf-8"), re.M)]


def test_readme_console_script_commands_parse():
    """`mtcore COMMAND ...` lines of the README: a known command, with flags its parser takes."""
    import importlib

    from mtcore.cli import COMMANDS

    assert len(README_MTCORE) >= 3
    for name, *argv in README_MTCORE:
        module = importlib.import_module(COMMANDS[name][0])
        module.parse_args(argv) if hasattr(module, "parse_args") else module.build_parser().parse_args(argv)


@pytest.mark.parametrize("raw, key, expected", [
    ("job.use_gpu=yes", "use_gpu", "yes"), ("job.use_gpu=no", "use_gpu", "no"), ("job.use_gpu=auto", "use_gpu", "auto"),
    ("job.workers=3", "workers", 3), ("job.log_model=no", "log_model", False), ("job.log_model=1", "log_model", True),
    ("job.run_name=007", "run_name", "007"),  # a string field keeps its text: not the int 7
])
def test_overrides_take_the_type_their_field_declares(raw, key, expected):
    assert getattr(TrainingJob.load(None, [raw]).job, key) == expected


@pytest.mark.parametrize("raw, message", [
    ("job.use_gpu=maybe", "`job.use_gpu` must be auto, yes or no"),
    ("train.bf16=perhaps", "`train.bf16` must be a boolean"),
    ("job.workers=two", "`job.workers` must be int"),
    ("model.haeds=4", "did you mean `heads`?"),
    ("model.preset=huge", "override 'model.preset=huge': unknown model preset 'huge'"),  # the override, not the default job file
    ("train.time_budget_min=-1", "override 'train.time_budget_min=-1': time_budget_min must be >= 0"),
    ("jobs.workers=1", "(and 'search.' in a search); did you mean `job.workers`?"),
    ("job.workers", "override 'job.workers' must look like key=value"),
    # found by a review: accepted, then each worker failed after start-up (retried 3 times), or a path escaped runs/
    ("train.seed=-1", "`seed` (-1) must be >= 0"),
    ("job.vocab_size=0", "`job.vocab_size` (0) must be >= 16"),
    ("model.vocab_size=100", "`model.vocab_size` (100) is the tokenizer's, which `job.vocab_size` (8000) sizes"),
    ("job.run_name=../escaped", "`job.run_name` '../escaped': a run name is one folder name"),
    ("job.character_coverage=0.5", "`job.character_coverage` (0.5) must be in [0.98, 1] (0.9995 for CJK)"),
])
def test_bad_overrides_name_the_key(raw, message):
    with pytest.raises(ConfigError, match=re.escape(message)) as err:
        TrainingJob.load(None, [raw])
    assert "default_job.yaml" not in str(err.value)


@pytest.mark.parametrize("body, message", [
    ("model: tiny\n", "`model` config must be a mapping"),  # with the early override below: not a TypeError
    ("job: []\n", "`job` config must be a mapping"),  # not an empty section
    ("train: {1: 2, foo: 3}\n", "unknown `train` key(s) [1, 'foo']"),  # keys of two types
])
def test_bad_sections_are_named_even_with_an_early_override(tmp_path, body, message):
    cfg = tmp_path / "job.yaml"
    cfg.write_text(body)
    with pytest.raises(ConfigError, match=re.escape(message)):
        TrainingJob.load(cfg, ["model.preset=tiny"])


def test_a_home_path_in_a_job_file_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    cfg = tmp_path / "job.yaml"
    cfg.write_text("job: {train_data: ~/corpus.tsv, dev_data: ~/dev.tsv}\n")
    job = TrainingJob.load(cfg).job
    assert (job.train_data, job.dev_data) == (str(tmp_path / "corpus.tsv"), str(tmp_path / "dev.tsv"))


def test_a_yaml_exponent_without_a_dot_is_a_number(tmp_path):
    """PyYAML reads `1e-3` as a string (YAML 1.1 wants `1.0e-3`); a float field reads it as the number."""
    cfg = tmp_path / "job.yaml"
    cfg.write_text("model: {preset: auto}\ntrain: {lr_scale: 5e-1, time_budget_min: 1e1, label_smoothing: 1E-1}\n")
    job = TrainingJob.load(cfg)
    assert (job.run.train.lr_scale, job.run.train.label_smoothing) == (0.5, 0.1)
    cfg.write_text("train: {lr_scale: 1e-3x}\n")
    with pytest.raises(ConfigError, match="`train.lr_scale` must be float"):
        TrainingJob.load(cfg)


def test_yaml_booleans_in_string_fields_read_as_words(tmp_path):
    cfg = tmp_path / "job.yaml"
    cfg.write_text("job: {use_gpu: yes, train_data: nb.tsv, dev_data: dev.tsv, test_data: test.tsv}\n"
                   "model: {src_lang: no, tgt_lang: en}\n")  # YAML 1.1: yes and no are booleans
    job = TrainingJob.load(cfg)
    assert (job.job.use_gpu, job.run.model.src_lang) == ("yes", "no")


def test_yaml_merge_keys_are_yaml_and_a_key_given_twice_is_still_refused(tmp_path):
    """`<<: *anchor` was refused as invalid YAML by the duplicate-key check; a mapping's own keys beat merged ones."""
    cfg = tmp_path / "job.yaml"
    cfg.write_text("x-small: &small {preset: tiny, heads: 2}\nx-short: &short {max_steps: 20, warmup: 10}\n"
                   "model: {<<: *small, heads: 4}\ntrain:\n  <<: [*short]\n  warmup: 5\n")
    data = load_yaml(cfg)
    assert data["model"] == {"preset": "tiny", "heads": 4} and data["train"] == {"max_steps": 20, "warmup": 5}
    cfg.write_text("model:\n  <<: {preset: tiny}\n  heads: 2\n  heads: 4\n")
    twice = "job.yaml:4: not valid YAML: key 'heads' given twice (first at line 3)"
    with pytest.raises(ConfigError, match=re.escape(twice)):
        load_yaml(cfg)


@pytest.mark.parametrize("overrides", [
    ["model.src_lang=EN"], ["model.src_lang=En", "model.tgt_lang=VI", "job.corpus_langs=en-VI"],
    ["model.src_lang=VI", "model.tgt_lang=en"],
])
def test_language_codes_are_one_spelling_whatever_their_case(overrides):
    """model.src_lang=EN: "model EN-vi and corpus languages EN-vi differ" (one side was lower-cased)."""
    model = TrainingJob.load(None, overrides).run.model
    assert {model.src_lang, model.tgt_lang} == {"en", "vi"} and model.direction in ("en-vi", "vi-en")
    with pytest.raises(ConfigError, match="`src_lang` and `tgt_lang` are both 'en'"):
        TrainingJob.load(None, ["model.src_lang=EN", "model.tgt_lang=en"])


@pytest.mark.parametrize("native_bf16", [False, True])
def test_auto_preset_follows_budget_and_hardware(monkeypatch, native_bf16):
    from mtcore import hardware

    monkeypatch.setattr(hardware, "cpu_bf16_is_fast", lambda: native_bf16)
    cpu = TrainingJob.load(None, ["model.preset=auto", "train.time_budget_min=11"])
    assert (cpu.run.model.d_model, cpu.run.model.layers) == (128, 2) and "mini" in cpu.preset_note
    short_cpu = TrainingJob.load(None, ["model.preset=auto", "train.time_budget_min=5"])
    # fp32: tiny won at 5 and 10 minutes; in bf16 mini did (benchmarks/budget_curve.py)
    assert short_cpu.run.model.d_model == (128 if native_bf16 else 64)
    assert ("mini" if native_bf16 else "tiny") in short_cpu.preset_note and ("with bf16" in short_cpu.preset_note) == native_bf16
    fp32 = TrainingJob.load(None, ["model.preset=auto", "train.time_budget_min=5", "train.bf16=no"])  # known before auto
    assert fp32.run.model.d_model == 64 and not fp32.run.train.bf16
    # dropout 0 won the 11-minute runs in bf16 and in fp32; longer budgets keep 0.1
    assert (cpu.run.model.dropout, short_cpu.run.model.dropout, fp32.run.model.dropout) == (0.0, 0.0, 0.0)
    assert "no dropout" in cpu.preset_note
    assert TrainingJob.load(None, ["model.preset=auto", "train.time_budget_min=20"]).run.model.dropout == 0.1
    mine = TrainingJob.load(None, ["model.preset=auto", "train.time_budget_min=11", "model.dropout=0.2"])
    assert mine.run.model.dropout == 0.2  # the user's key wins
    long_cpu = TrainingJob.load(None, ["model.preset=auto", "train.time_budget_min=120"])
    assert long_cpu.run.model.d_model == 128 and "mini" in long_cpu.preset_note  # the longest budget measured won
    gpu = TrainingJob.load(None, ["model.preset=auto", "train.time_budget_min=120"], gpus=2)
    assert (gpu.run.model.d_model, gpu.run.model.layers, gpu.run.train.warmup) == (512, 6, 4000)
    explicit = TrainingJob.load(None, ["model.preset=auto", "model.heads=2", "train.lr_scale=3"])
    assert (explicit.run.model.heads, explicit.run.train.lr_scale) == (2, 3.0)  # the user's keys win
    assert auto_settings(0, 0)[0]["d_model"] == 128  # no budget on CPU: the last row of the rule


def test_plan_with_declared_gpus_uses_nccl_and_bf16():
    job = TrainingJob.load(ROOT / "experiments/configs/base.yaml", ["job.use_gpu=yes"])
    plan = make_plan(job, cpus=16, gpus=2)
    text = "\n".join(plan.lines())
    assert (plan.workers, plan.use_gpu, plan.backend, plan.precision) == (2, True, "nccl", "bf16 autocast")
    assert plan.tokens_per_step == 16384 * 2 and "512d × 6 layers" in text
    assert 40e6 < plan.params < 80e6  # Transformer-base with a 16k shared vocabulary
    with pytest.raises(PlanError, match="has no GPUs"):
        make_plan(job, cpus=16, gpus=0)
    compiled = make_plan(TrainingJob.load(ROOT / "experiments/configs/base.yaml", ["job.use_gpu=yes", "train.compile=yes"]),
                         cpus=16, gpus=2)
    assert compiled.precision == "bf16 autocast, torch.compile"


def run_cli(args: list[str], code: str | None = None, timeout: int = 180) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    cmd = [sys.executable, "-c", code] if code else [sys.executable, "experiments/train_transformer.py", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_gpu_flag_without_gpus_fails_in_one_line_before_ray_starts():
    proc = run_cli(["--config", "experiments/configs/base.yaml", "--gpu", "--dry-run"], timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "--gpu" in proc.stderr and "no CUDA GPU" in proc.stderr
    assert "Traceback" not in proc.stderr and "Ray" not in proc.stdout


def test_a_dry_run_names_a_missing_corpus(tmp_path):
    """It printed a full plan and exited 0; the search's dry run refused the same --data."""
    proc = run_cli(["--dry-run", "--data", str(tmp_path / "no_such.tsv")], timeout=120)
    assert proc.returncode == 2 and f"error: job.train_data: {tmp_path / 'no_such.tsv'}: file not found" in proc.stderr
    # and before Ray starts (it started a local instance and printed the plan first, ~10 s), run or dry run
    for args in (["--data", str(tmp_path / "no_such.tsv")], [f"job.test_data={tmp_path / 'no_test.parquet'}"]):
        proc = run_cli(args, timeout=120)
        assert proc.returncode == 2 and "file not found" in proc.stderr and "Ray" not in proc.stdout + proc.stderr


def test_gpu_dry_run_on_a_ray_instance_with_declared_gpus():
    """`ray.init(num_gpus=2)` declares logical GPUs without hardware: the plan is what a GPU node would run."""
    code = (
        "import ray, sys; ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, object_store_memory=80*1024**2, "
        "log_to_driver=False)\n"
        "import runpy; sys.argv = ['train_transformer.py', '--config', 'experiments/configs/base.yaml', '--gpu', "
        "'--dry-run']\n"
        "runpy.run_path('experiments/train_transformer.py', run_name='__main__')"
    )
    proc = run_cli([], code=code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "2 × GPU (cluster: 2 CPUs, 2 GPUs), backend nccl" in proc.stdout
    assert "bf16 autocast" in proc.stdout and "16,384 tokens per worker × 1 accumulation × 2 workers" in proc.stdout


def test_a_search_re_picks_auto_for_its_trial_budget():
    from mtcore.distributed.tune import DEFAULT_SEARCH, TuneJob, base_point
    from mtcore.hardware import cpu_trains_in_bf16

    default = TuneJob.load(DEFAULT_SEARCH)  # 800-step trials, 6 min at most: mini in bf16, tiny where the CPU has no bf16
    preset, width = ("mini", 128) if cpu_trains_in_bf16(default.base.run.train.bf16) else ("tiny", 64)
    assert default.base.run.model.d_model == width and preset in default.base.preset_note
    longer = TuneJob.load(DEFAULT_SEARCH, ["train.time_budget_min=12"])
    assert longer.base.run.model.d_model == 128 and longer.base.run.train.time_budget_min == 12
    assert default.search.start_from_base and base_point(default)["train"]["lr_scale"] == default.base.run.train.lr_scale


def test_the_run_name_changes_with_what_is_trained():
    """A rerun with the corpus columns swapped, or with other workers (another batch per step), is another run:
    it used to resume the old one under the same name and publish its checkpoint."""
    from mtcore.distributed.jobs import DEFAULT_JOB

    base = TrainingJob.load(DEFAULT_JOB).run_name("d")
    assert TrainingJob.load(DEFAULT_JOB, ["job.test_limit=5", "job.experiment=x"]).run_name("d") == base  # where tested/logged
    others = [TrainingJob.load(DEFAULT_JOB, [o]).run_name("d") for o in ("job.corpus_langs=vi-en", "job.workers=1", "job.use_gpu=no")]
    assert base not in others and len(set(others)) == 3


def test_expected_steps_respect_a_step_cap():
    from mtcore.distributed.jobs import DEFAULT_JOB

    assert make_plan(TrainingJob.load(DEFAULT_JOB), cpus=2, gpus=0).expected_steps > 500  # the 11-minute default
    assert make_plan(TrainingJob.load(DEFAULT_JOB, ["train.max_steps=100"]), cpus=2, gpus=0).expected_steps == 100


def test_a_warm_up_the_run_never_finishes_is_said():
    """A named preset on the 11-minute CPU budget keeps the paper's 4,000-step warm-up and batch: ~190 steps at
    5 % of the learning rate, and nothing said it."""
    from mtcore.distributed.jobs import DEFAULT_JOB

    assert make_plan(TrainingJob.load(DEFAULT_JOB), cpus=2, gpus=0).warnings() == []
    small = make_plan(TrainingJob.load(DEFAULT_JOB, ["model.preset=small"]), cpus=2, gpus=0)
    assert small.warmup == 4000 and any("warm-up 4,000 steps > the run's ~" in line for line in small.lines())
    fp32 = make_plan(TrainingJob.load(DEFAULT_JOB, ["model.preset=small", "train.bf16=no"]), cpus=2, gpus=0)
    assert any("warm-up 4,000 steps > the run's ~190" in line for line in fp32.lines())  # 47.4 steps/min x 11 x 3000/8192
    capped = make_plan(TrainingJob.load(ROOT / "experiments/configs/tiny.yaml", ["train.warmup=5000", "train.max_steps=20"]),
                       cpus=2, gpus=0)
    assert capped.warnings() and "(0 % of it at the end)" in capped.warnings()[0]
    exact = make_plan(TrainingJob.load(ROOT / "experiments/configs/tiny.yaml", ["train.warmup=5", "train.max_steps=5"]),
                      cpus=2, gpus=0)
    assert exact.warnings() == []  # the last step is at the peak: nothing to say


def test_a_position_table_shorter_than_the_longest_pair_is_refused_before_training():
    from mtcore.distributed.jobs import DEFAULT_JOB

    with pytest.raises(ConfigError, match="max_positions. 8 is below .train.max_len. 256"):
        TrainingJob.load(DEFAULT_JOB, ["model.max_positions=8"])
    TrainingJob.load(DEFAULT_JOB, ["model.max_positions=8", "train.max_len=6"])  # consistent: accepted


def test_tune_dry_run_counts_the_grid(tmp_path):
    """`--dry-run` printed num_samples; with `grid` keys Tune runs num_samples × the grid."""
    space = tmp_path / "grid.yaml"
    space.write_text("model.heads: {grid: [2, 4]}\ntrain.warmup: {choice: [10, 40]}\n")
    code = ("import sys; sys.argv = ['tune', '--config', 'experiments/configs/tune_tiny.yaml', '--search-space', "
            f"{str(space)!r}, '--num-samples', '3', '--dry-run']; import runpy; runpy.run_path('experiments/tune_transformer.py', run_name='__main__')")
    proc = run_cli([], code=code)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^trials +6 \(3 samples × the grid\)", proc.stdout, re.M), proc.stdout


def test_the_auto_note_says_which_of_its_choices_the_job_overrides():
    """It read "-> mini (128d, 2 layers), the best test BLEU for such a budget" beside a 256d × 6-layer model."""
    from mtcore.distributed.jobs import DEFAULT_JOB

    assert "overrides" not in TrainingJob.load(DEFAULT_JOB).preset_note
    note = TrainingJob.load(DEFAULT_JOB, ["model.d_model=256", "model.layers=6", "train.max_tokens=4000"]).preset_note
    assert note.endswith("the job overrides model.d_model, model.layers, train.max_tokens, so what trains is not "
                         "that measured choice")


def test_the_auto_note_claims_a_measurement_only_for_measured_budgets():
    """Budgets of 45 min, 100 min or none were said to be "the best test BLEU for such a budget": only 5–40 min are."""
    from mtcore.config import auto_settings

    assert auto_settings(11, 0)[2].endswith("the best test BLEU for such a budget in benchmarks/budget_curve.py")
    for budget in (45, 100, 0):
        assert auto_settings(budget, 0)[2].endswith("the best at 40 min in benchmarks/budget_curve.py (longer budgets "
                                                    "are not measured)")
