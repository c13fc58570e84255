"""Ray Tune search: space validation, resource planning, a tiny search end to end, resume, failed trials."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import sys
from pathlib import Path

import mlflow
import pytest
import yaml
from ray.tune import Callback

from mtcore.distributed import tune as tuning
from mtcore.distributed.tune import driver, resources
from mtcore.config import ConfigError
from mtcore.distributed.tune import DEFAULT_SEARCH, SearchConfig, TuneError, TuneJob, plan_resources
from mtcore.distributed.tune.space import AshaConfig, flat_trial_values

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "experiments" / "configs" / "tune_tiny.yaml"
SMALL = DEFAULT_SEARCH


@pytest.fixture
def runs_dir(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    monkeypatch.setenv("MTCORE_HOME", str(runs))
    return runs


def toy_overrides(toy_corpus) -> list[str]:
    return [f"job.train_data={toy_corpus['train']}", f"job.dev_data={toy_corpus['dev']}", f"job.test_data={toy_corpus['test']}",
            "job.vocab_size=400", "job.test_limit=10", "train.max_tokens=400", "train.max_len=32", "train.dev_limit=10",
            "train.max_steps=16"]


def tiny_search(toy_corpus, space: dict, overrides=(), **search) -> TuneJob:
    d = yaml.safe_load(TINY.read_text())
    d["search"] = {**d["search"], "space": space}
    return TuneJob.from_dict(d, str(TINY)).with_overrides(toy_overrides(toy_corpus) + list(overrides), **search)


# --------------------------------------------------------------------------- the space, before anything runs


@pytest.mark.parametrize("space, culprit", [
    ({"model.heads": {"choice": [2, 4, 6]}}, "`model.heads`: value 6"),  # tiny: d_model 64
    ({"train.warmup": {"randint": [-10, 100]}}, "`train.warmup`: value -10"),
    ({"train.label_smoothing": {"uniform": [0.0, 1.0]}}, "`train.label_smoothing`: value 1.0"),
    ({"train.label_smoothing": {"choice": [0.1, -0.1]}}, "`train.label_smoothing`: value -0.1"),
    ({"train.warmup": {"choice": [100, 2.5]}}, "`train.warmup`: value 2.5"),
    ({"model.d_model": {"choice": [64, 100]}, "model.heads": {"choice": [4, 8]}}, "`model.d_model`=100, `model.heads`=8"),
    ({"model.hedas": {"choice": [2]}}, "`model.hedas`: unknown key; did you mean `model.heads`?"),
    ({"modle.heads": {"choice": [2]}}, "can be searched; did you mean `model.heads`?"),
    ({"model": {"heads": {"choice": [2, 4]}}}, "write the key dotted: `model.heads: {choice: […]}`"),
    ({"job.workers": {"choice": [1, 2]}}, "only model.* and train.*"),
    ({"train.warmup": {"uniform": [100, 50]}}, "low < high"),
    ({"train.warmup": {"normal": [100, 50]}}, "unknown kind"),
    ({}, "`search.space` is empty"),
    ({"model.arch": {"choice": ["transformer", "rnn"]}, "model.heads": {"choice": [4, 6]}}, "`model.heads`: value 6"),
    ({"model.arch": {"choice": ["transformer", "gru"]}}, "`model.arch`: value 'gru'"),
    ({"model.arch": {"choice": ["transformer", "rnn"]}, "model.rnn_hidden": {"choice": [64, 33]}},
     "`model.arch`='rnn', `model.rnn_hidden`=33 together are not allowed: `rnn_hidden` (33) must be even"),
    ({"model.src_lang": {"choice": ["en"]}}, "`model.src_lang`: not a hyperparameter"),
    ({"train.warmup": {"uniform": [100, 400]}}, "`train.warmup`: an integer key; uniform samples fractions"),
    ({"model.heads": {"randint": [2, 8]}}, "`model.heads`: value 3"),  # every integer of a narrow range is checked
])
def test_impossible_space_is_rejected_naming_the_parameter(space, culprit):
    d = yaml.safe_load(TINY.read_text())
    d["search"]["space"] = space
    with pytest.raises(ConfigError, match="search") as err:
        TuneJob.from_dict(d, "tune.yaml")
    assert culprit in str(err.value)


def test_cli_rejects_a_bad_space_before_any_trial(tmp_path, runs_dir, capsys):
    sys.path.insert(0, str(REPO / "experiments"))
    import tune_transformer

    d = yaml.safe_load(TINY.read_text())
    d["search"]["space"]["model.heads"] = {"choice": [2, 3]}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(d))
    assert tune_transformer.main(["--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "search space `model.heads`: value 3 is not allowed: `heads` (3) must divide `d_model` (64)" in err
    assert not (runs_dir / "ray_tune").exists()


def test_dry_run_says_the_rungs_the_base_trial_and_the_base_model(ray_local, runs_dir, capsys):
    from mtcore.cli import tune as tune_cli

    assert tune_cli.main(["--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "scheduler    asha on dev/loss: keeps the best 1/3 at steps 100, 300 (of 800)" in out
    assert "the first is the base job's values" in out and "base         transformer" in out
    assert tune_cli.main(["--dry-run", "--scheduler", "fifo", "search.name=mine"]) == 0
    out = capsys.readouterr().out
    assert "scheduler    fifo: every trial runs to its end" in out and "search name mine" in out
    assert tune_cli.main(["--dry-run", "search.asha.grace_period=50"]) == 0  # between validations (every 100 steps)
    out = capsys.readouterr().out
    assert "keeps the best 1/3 at steps 50, 150, 450 (of 800; judged at the validations of steps 100, 200, 500)" in out
    assert tune_cli.main(["--dry-run", "train.max_steps=500", "train.validate_every=300", "search.asha.grace_period=350"]) == 0
    assert "at steps 350 (of 500; judged at the validations of steps 500)" in capsys.readouterr().out  # the last step's
    assert tune_cli.main(["--dry-run", "train.max_steps=500", "train.validate_every=0"]) == 0
    assert "(of 500; judged at the validation that ends each epoch)" in capsys.readouterr().out


def test_shipped_configs_load_and_sample_the_same_configs_whatever_the_scheduler():
    for path in (TINY, SMALL):
        tj = TuneJob.load(path)
        assert tj.search.space and tj.search.scheduler == "asha"
    tj = TuneJob.load(SMALL)
    assert tj.search_name() != tj.with_overrides(scheduler="fifo").search_name()
    assert tj.search_name() == TuneJob.load(SMALL).search_name()  # stable: --resume finds it again


def test_the_architecture_is_a_searchable_choice():
    tj = TuneJob.load(REPO / "experiments" / "configs" / "tune_arch.yaml")
    assert tj.search.space[0].key == "model.arch" and "-arch-" in tj.search_name()
    jobs = [tuning.apply_overrides(tj.base, {"model.arch": arch}) for arch in ("transformer", "rnn")]
    assert [j.run.model.arch for j in jobs] == ["transformer", "rnn"]
    assert jobs[1].run_name().startswith("rnn-lstm-general-d128-H256-L2-")
    assert tuning.registered_name(tj, "rnn") == "mtcore-en-vi-rnn" and tuning.registered_name(tj) == "mtcore-en-vi-transformer"


def test_optuna_missing_is_a_clear_error(monkeypatch):
    tj = TuneJob.load(TINY, search="optuna")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "optuna" else real(name, *a))
    with pytest.raises(TuneError, match=r"pip install 'mtcore\[optuna\]'"):
        driver._searcher(tj, 1)
    with pytest.raises(TuneError, match=r"pip install 'mtcore\[optuna\]'"):
        driver.plan_search(tj)  # --dry-run says it too
    with pytest.raises(TuneError, match=r"pip install 'mtcore\[optuna\]'"):
        driver.run_search(tj)  # before anything is written or a parent run opened (it stayed RUNNING)


def test_a_search_that_fails_ends_its_parent_run(ray_local, mlflow_uri, runs_dir, toy_corpus, monkeypatch):
    from ray import tune

    def broken(*args, **kwargs):
        raise RuntimeError("Tune broke")

    monkeypatch.setattr(tune, "Tuner", broken)
    tj = tiny_search(toy_corpus, {"train.warmup": {"choice": [10, 20]}}, num_samples=1)
    with pytest.raises(RuntimeError, match="Tune broke"):
        driver.run_search(tj, verbose=0)
    client = mlflow.MlflowClient(mlflow_uri)
    runs = client.search_runs([client.get_experiment_by_name(tj.search.experiment).experiment_id])
    assert runs and {r.info.status for r in runs} == {"FAILED"}


# --------------------------------------------------------------------------- resources


@pytest.mark.parametrize("cpus, gpus, search, expected", [
    (2, 0, {}, (2, 1, False)),  # the default on 2 cores: one trial at a time on 2 DDP workers
    (2, 0, {"workers_per_trial": 1}, (1, 2, False)),  # or 2 trials × 1 worker
    (2, 0, {"workers_per_trial": 1, "num_samples": 1}, (1, 1, False)),
    (16, 4, {}, (1, 4, True)),  # a GPU cluster: one GPU worker per trial, a trial per GPU
    (16, 4, {"workers_per_trial": 2}, (2, 2, True)),
    (16, 4, {"gpus_per_worker": 0}, (2, 4, False)),
])
def test_resources_never_oversubscribe(cpus, gpus, search, expected):
    plan = plan_resources(SearchConfig(space=(tuning.Param("model.heads", "choice", (2,)),), **search), cpus, gpus)
    assert (plan.workers_per_trial, plan.concurrent_trials, plan.use_gpu) == expected
    per_trial = plan.workers_per_trial
    assert per_trial * plan.concurrent_trials <= (min(cpus, gpus) if plan.use_gpu else cpus)


@pytest.mark.parametrize("cpus, gpus, search, message", [
    (2, 0, {"workers_per_trial": 3}, "3 workers per trial need 3 CPUs, but the Ray cluster has 2 CPUs"),
    (2, 0, {"workers_per_trial": 2, "concurrent_trials": 2}, "2 concurrent trials × 2 workers × 1 CPU = 4 CPUs, but the Ray cluster has 2"),
    (2, 0, {"gpus_per_worker": 1}, "the Ray cluster has no GPUs"),
    (16, 2, {"workers_per_trial": 4}, "4 workers per trial need 4 GPUs, but the Ray cluster has 2 GPUs"),
])
def test_asking_for_more_than_the_cluster_has_is_an_error(cpus, gpus, search, message):
    with pytest.raises(TuneError) as err:
        plan_resources(SearchConfig(space=(tuning.Param("model.heads", "choice", (2,)),), **search), cpus, gpus)
    assert message in str(err.value)


# --------------------------------------------------------------------------- searches on Ray


def test_tiny_search_tracks_trials_registers_the_best_and_survives_a_crashing_trial(
    ray_local, mlflow_uri, runs_dir, toy_corpus, capsys
):
    # max_positions 4 passes the config check but every batch is longer: that trial crashes at its first step.
    # (It goes first, so that the other trials overlap with it and with each other: 2 trials × 1 worker.)
    space = {"model.max_positions": {"grid": [4, 256, 128]}, "train.warmup": {"choice": [10, 40]}}
    tj = tiny_search(toy_corpus, space, num_samples=1, workers_per_trial=1)  # 2 trials × 1 worker at a time
    out = tuning.run_search(tj)  # verbose=1: mtcore's progress lines, none of Ray Tune's own

    captured = capsys.readouterr()
    printed = captured.out
    assert "Trial task failed" not in captured.err  # Ray's 70-line traceback; mtcore's line gives its last line
    assert out.plan.concurrent_trials == 2 and out.plan.workers_per_trial == 1 and not out.interrupted
    for r in out.rows:
        assert re.search(rf"^trial {r.trial_id.split('_')[-1]} started \(\d/3\): max_positions={r.values['model.max_positions']} ", printed, re.M)
    assert re.search(r"^trial \d+ failed \([^)]*\): .*max_positions.*; the search goes on", printed, re.M), printed
    assert re.search(r"^trial \d+ step +\d+  dev BLEU [\d.]+ \(best [\d.]+\)", printed, re.M)
    assert re.search(r"^trial \d+ (finished at step \d+: best dev BLEU [\d.]+, test BLEU|stopped early at step)", printed, re.M)
    assert "[3/3 done]" in printed
    for ray_line in ("Configuration for experiment", "View detailed results here", "TensorBoard", "Trial status"):
        assert ray_line not in printed
    by_positions = {r.values["model.max_positions"]: r for r in out.rows}
    assert sorted(by_positions) == [4, 128, 256]
    assert by_positions[4].status == "FAILED" and "max_positions" in by_positions[4].error
    assert {by_positions[p].status for p in (128, 256)} <= {"COMPLETED", "STOPPED"}
    assert out.best in (by_positions[128], by_positions[256]) and out.best.steps > 0
    assert out.test["test/bleu_signature"].startswith("nrefs:1") and out.test["test/bleu"] >= 0
    table = tuning.format_table(out.rows, tj.search.space)
    assert "FAILED" in table and "stopped early" in table and "max_positions" in table

    client = mlflow.MlflowClient(mlflow_uri)
    experiment = client.get_experiment_by_name("tune_transformer")
    parent = client.get_run(out.parent_run_id)
    assert parent.info.run_name == out.name and parent.info.status == "FINISHED"
    assert parent.info.experiment_id == experiment.experiment_id
    assert parent.data.metrics["best/test_bleu"] == pytest.approx(out.test["test/bleu"])
    assert parent.data.params["space.model.max_positions"] == "grid [4, 256, 128]"
    children = client.search_runs([experiment.experiment_id], f"tags.mlflow.parentRunId = '{out.parent_run_id}'")
    assert len(children) == 3
    # one tag finds the search's parent and its trials together; the searcher has its own
    together = client.search_runs([experiment.experiment_id], f"tags.`mtcore.tune.search` = '{out.name}'")
    assert len(together) == 4 and parent.data.tags["mtcore.tune.searcher"] == "random"
    status = {int(c.data.params["model.max_positions"]): c.info.status for c in children}
    assert status[4] == "FAILED" and "max_positions" in next(
        c for c in children if c.data.params["model.max_positions"] == "4").data.tags["mtcore.tune.error"]
    for c in children:
        if c.data.params["model.max_positions"] != "4":
            assert "dev/bleu" in c.data.metrics and c.info.status in ("FINISHED", "KILLED")
            assert c.data.tags["mtcore.tune.stopped_early"] == ("true" if c.info.status == "KILLED" else "false")

    versions = client.search_model_versions("name = 'mtcore-en-vi-transformer'")
    assert len(versions) == 1 and out.registered == "mtcore-en-vi-transformer/1"
    assert versions[0].run_id == out.best.mlflow_run_id
    translator = mlflow.pyfunc.load_model("models:/mtcore-en-vi-transformer/1")
    assert all(isinstance(t, str) for t in translator.predict(["the big cat is here"]))


def test_start_from_base_runs_the_base_values_first(ray_local, mlflow_uri, runs_dir, toy_corpus, tmp_path):
    """On a data job's output (`--data runs/backtranslate`), whose lineage the search and its trials carry: the
    corpus was resolved before the lineage was read, and both runs lost it."""
    import shutil

    from mtcore.runs import write_data_pointer

    job_out = tmp_path / "datajob"
    (job_out / "07_assemble" / "augmented").mkdir(parents=True)
    shutil.copy(toy_corpus["train"], job_out / "07_assemble" / "augmented" / "part-00000.parquet")
    write_data_pointer(job_out, job_out / "07_assemble" / "augmented", "fp-of-the-data-job", None)
    # The base's warmup (50, tune_tiny.yaml) and label smoothing (0.1) are not what the space would sample.
    space = {"train.warmup": {"choice": [10, 20]}, "train.label_smoothing": {"uniform": [0.15, 0.2]}}
    tj = tiny_search(toy_corpus, space, ["train.max_steps=8", f"job.train_data={job_out}"], num_samples=2,
                     start_from_base=True, scheduler="fifo", register_as="-")
    assert tuning.base_point(tj) == {"train": {"warmup": 50, "label_smoothing": 0.1}}
    out = tuning.run_search(tj, verbose=0)
    values = sorted((r.values["train.warmup"], round(r.values["train.label_smoothing"], 3)) for r in out.rows)
    assert len(values) == 2 and values[1] == (50, 0.1) and values[0][0] in (10, 20)  # the base, and one sample
    client = mlflow.MlflowClient(mlflow_uri)
    exp = client.get_experiment_by_name(tj.search.experiment)
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 3 and all(r.data.tags.get("mtcore.data_fingerprint") == "fp-of-the-data-job" for r in runs)


def test_start_from_base_is_checked():
    d = yaml.safe_load(TINY.read_text())
    with pytest.raises(ConfigError, match="start_from_base` must be true or false"):
        TuneJob.from_dict({**d, "search": {**d["search"], "start_from_base": "yes please"}})
    with pytest.raises(ConfigError, match="do not mix"):
        TuneJob.from_dict({**d, "search": {**d["search"], "start_from_base": True, "space": {"model.heads": {"grid": [2, 4]}}}})



def test_a_grid_space_file_runs_with_the_default_search_once_start_from_base_is_off(tmp_path):
    (tmp_path / "g.yaml").write_text("train.warmup: {grid: [150, 300]}\n")
    with pytest.raises(ConfigError, match="search.start_from_base=false"):
        TuneJob.load(DEFAULT_SEARCH, [], space_file=tmp_path / "g.yaml")
    tj = TuneJob.load(DEFAULT_SEARCH, ["search.start_from_base=false"], space_file=tmp_path / "g.yaml")
    assert tj.search.space[0].kind == "grid" and not tj.search.start_from_base


def test_a_trial_asha_stops_gives_its_workers_to_the_next(ray_local, mlflow_uri, runs_dir, toy_corpus, monkeypatch):
    # One trial at a time on both CPUs; the middle one cannot learn (lr_scale 0.001), so ASHA stops it
    # before its Train run reaches step 48. The third trial needs that run's CPUs: before the fix its
    # placement group outlived it and the third trial waited for it, then failed (checked again with 48
    # steps, 2026-11-26: without the dead-controller rule the third trial never reached a step).
    # Only the dead-controller rule may release it: the fallback (no worker for UNUSED_GROUP_S) is turned off.
    monkeypatch.setattr(resources, "UNUSED_GROUP_S", 10**6)
    space = {"train.lr_scale": {"grid": [2.0, 0.001, 3.0]}}
    tj = tiny_search(toy_corpus, space, ["train.max_steps=48", "train.validate_every=8"], num_samples=1,
                     workers_per_trial=2, register_as="-")
    out = tuning.run_search(tj, verbose=0)
    assert [r.values["train.lr_scale"] for r in out.rows] == [2.0, 0.001, 3.0]
    assert out.rows[1].stopped_early and out.rows[2].status != "FAILED" and out.rows[2].steps > 0, out.rows
    assert not held_worker_groups()


def test_halving_pauses_every_trial_at_the_rung_and_resumes_only_the_best(ray_local, mlflow_uri, runs_dir, toy_corpus,
                                                                           capsys):
    # Four trials, one at a time: each trains to the rung (step 8) and waits there; once all four have, the best half
    # by dev loss go on and the two that cannot learn (lr_scale 0.001) stop. The last to arrive (lr 3) goes straight
    # on; the other winner is restarted, and Ray Train resumes its run from the step-8 checkpoint.
    space = {"train.lr_scale": {"grid": [0.001, 2.0, 0.0011, 3.0]}}
    tj = tiny_search(toy_corpus, space, ["train.max_steps=16", "train.validate_every=8"], num_samples=1,
                     scheduler="halving", register_as="-",
                     asha=AshaConfig(metric="dev/loss", grace_period=8, reduction_factor=2))
    starts = []

    class Starts(Callback):
        def on_trial_start(self, iteration, trials, trial, **info):
            starts.append(flat_trial_values(trial.config)["train.lr_scale"])

    out = tuning.run_search(tj, tune_callbacks=[Starts()], verbose=1)
    by_lr = sorted(out.rows, key=lambda r: r.values["train.lr_scale"])
    said = capsys.readouterr().out
    assert said.count(" started (") == 4 and f"trial {by_lr[2].trial_id[-5:]} resumed: among the best at step 8" in said
    assert [(r.status, r.steps) for r in by_lr] == [("STOPPED", 8), ("STOPPED", 8), ("COMPLETED", 16), ("COMPLETED", 16)], out.rows
    assert starts == [0.001, 2.0, 0.0011, 3.0, 2.0]  # every trial reached the rung before any went on
    resumed = by_lr[2]  # lr 2: paused at step 8, then restarted
    log = next((runs_dir / "ray_train").glob(f"{resumed.trial_id}-*/progress.log")).read_text()
    assert "resuming from step 8" in log and log.count("step      4 ") == 1  # 16 steps in all, not 8 + 16
    client = mlflow.MlflowClient(mlflow_uri)
    for r in by_lr[2:]:  # one MLflow run per trial, each validation logged once across the restart
        assert [m.step for m in client.get_metric_history(r.mlflow_run_id, "dev/loss")] == [8, 16]
    # Its minutes before the pause count too: Tune's own clock (time_total_s) restarts at 0 with the trial.
    assert resumed.minutes > max(x.minutes for x in by_lr[:2]) + 0.1, out.rows
    assert out.best in by_lr[2:] and not held_worker_groups()


class InterruptAtThirdStart(Callback):
    """Ctrl-C (SIGUSR1, Tune's graceful stop) as the third trial starts, when two trials wait paused at the rung; and,
    at every step of the search and of its resumed run (Tune restores its callbacks with it), how many trials run."""

    def __init__(self, marker: Path, running: Path):
        self.marker, self.running, self.starts = marker, running, 0

    def on_trial_start(self, iteration, trials, trial, **info):
        self.starts += 1
        if self.starts == 3 and not self.marker.exists():
            self.marker.write_text(trial.trial_id)
            os.kill(os.getpid(), signal.SIGUSR1)

    def on_step_end(self, iteration, trials, **info):
        with self.running.open("a") as f:
            f.write(f"{'resumed' if self.marker.exists() else 'first'} {sum(t.status == 'RUNNING' for t in trials)}\n")


def test_an_interrupted_halving_search_resumes_one_trial_at_a_time(ray_local, mlflow_uri, runs_dir, toy_corpus, tmp_path):
    space = {"train.lr_scale": {"grid": [2.0, 0.001, 3.0, 0.0011]}}
    tj = tiny_search(toy_corpus, space, ["train.max_steps=16", "train.validate_every=8"], num_samples=1,
                     scheduler="halving", register_as="-",
                     asha=AshaConfig(metric="dev/loss", grace_period=8, reduction_factor=2))
    running = tmp_path / "running"
    first = tuning.run_search(tj, tune_callbacks=[InterruptAtThirdStart(tmp_path / "interrupted", running)], verbose=0)
    assert first.interrupted
    again = tuning.run_search(tj, resume=True, verbose=0)
    assert not again.interrupted
    counts = [line.split() for line in running.read_text().splitlines()]
    assert {"first", "resumed"} <= {when for when, _ in counts} and max(int(n) for _, n in counts) == 1
    by_lr = sorted(again.rows, key=lambda r: r.values["train.lr_scale"])
    assert [(r.status, r.steps) for r in by_lr] == [("STOPPED", 8), ("STOPPED", 8), ("COMPLETED", 16), ("COMPLETED", 16)], again.rows


def test_a_worker_group_is_orphaned_once_the_actor_that_made_it_dies(ray_local):
    """What release_callback removes at once: a CPU group whose creating actor (a Train controller) is dead;
    never a living actor's group, nor one the driver made itself."""
    import time

    import ray
    from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group

    @ray.remote(num_cpus=0)
    class Controller:
        def make_group(self) -> str:
            group = placement_group([{"CPU": 1}])
            ray.get(group.ready())
            return group.id.hex()

    job = ray.get_runtime_context().get_job_id()
    own = placement_group([{"CPU": 1}])
    ray.get(own.ready())
    controller = Controller.remote()
    group = ray.get(controller.make_group.remote())
    try:
        assert group not in resources.orphaned_worker_groups(job) and own.id.hex() not in resources.orphaned_worker_groups(job)
        ray.kill(controller)
        deadline = time.monotonic() + 30
        while group not in resources.orphaned_worker_groups(job) and time.monotonic() < deadline:
            time.sleep(0.5)
        orphaned = resources.orphaned_worker_groups(job)
        assert group in orphaned and own.id.hex() not in orphaned
    finally:
        remove_placement_group(own)
        remove_placement_group(PlacementGroup(ray.PlacementGroupID(bytes.fromhex(group))))


def held_worker_groups() -> list[str]:
    """Placement groups that still reserve CPUs: a stopped trial's, if it leaked."""
    from ray.util import placement_group_table

    return [pid for pid, pg in placement_group_table().items()
            if pg["state"] != "REMOVED" and any("CPU" in bundle for bundle in pg["bundles"].values())]


class InterruptAfterFirstTrial(Callback):
    """Presses Ctrl-C once (SIGUSR1: Tune's graceful stop, as for SIGINT) when the first trial ends."""

    def __init__(self, marker: Path):
        self.marker = marker

    def on_trial_complete(self, iteration, trials, trial, **info):
        if not self.marker.exists():  # restored with the search: it must not interrupt the resumed run
            self.marker.write_text(trial.trial_id)
            os.kill(os.getpid(), signal.SIGUSR1)


def test_interrupted_search_resumes_without_rerunning_finished_trials(ray_local, mlflow_uri, runs_dir, toy_corpus, tmp_path):
    space = {"model.heads": {"grid": [2, 4]}}
    # The default plan: 1 trial at a time × 2 DDP workers; one validation per trial keeps it short.
    tj = tiny_search(toy_corpus, space, ["train.max_steps=8"], num_samples=1, scheduler="fifo")
    marker = tmp_path / "interrupted"
    first = tuning.run_search(tj, tune_callbacks=[InterruptAfterFirstTrial(marker)], verbose=0)
    assert first.interrupted and first.plan.workers_per_trial == 2 and first.plan.concurrent_trials == 1
    done = [r for r in first.rows if r.status == "COMPLETED"]
    assert [r.trial_id for r in done] == [marker.read_text()]
    client = mlflow.MlflowClient(mlflow_uri)
    assert client.get_run(first.parent_run_id).info.status == "KILLED"
    started = client.search_runs([client.get_run(first.parent_run_id).info.experiment_id],
                                 f"tags.mlflow.parentRunId = '{first.parent_run_id}'")
    assert started and all(c.info.status != "RUNNING" for c in started)  # an unfinished trial's child ends KILLED

    with pytest.raises(TuneError, match="--resume"):
        tuning.run_search(tj, verbose=0)  # a fresh start would silently drop the finished trial
    again = tuning.run_search(tj, resume=True, verbose=0)
    assert not again.interrupted and again.parent_run_id == first.parent_run_id
    assert sorted(r.status for r in again.rows) == ["COMPLETED", "COMPLETED"]
    kept = next(r for r in again.rows if r.trial_id == done[0].trial_id)
    assert kept.steps == done[0].steps and kept.mlflow_run_id == done[0].mlflow_run_id
    assert kept.minutes == done[0].minutes  # Tune holds no new result for it: it did not run again
    # Neither retrained nor re-evaluated: one validation and one test score in its MLflow run.
    assert [m.step for m in client.get_metric_history(kept.mlflow_run_id, "dev/bleu")] == [8]
    assert len(client.get_metric_history(kept.mlflow_run_id, "test/bleu")) == 1
    children = client.search_runs([client.get_run(first.parent_run_id).info.experiment_id],
                                  f"tags.mlflow.parentRunId = '{first.parent_run_id}'")
    assert len(children) == 2
    assert client.get_run(again.parent_run_id).info.status == "FINISHED" and again.registered


def test_resume_refuses_other_settings_and_a_spent_time_budget(tmp_path):
    """Tune restores its own copy of a search's settings: a resume with a new space, sample count or budget ran the
    old search and reported it "interrupted" forever; a search whose budget was spent ran nothing, again and again."""
    tj = TuneJob.load(DEFAULT_SEARCH, [], num_samples=2)
    other = TuneJob.load(DEFAULT_SEARCH, [], num_samples=3)
    longer = TuneJob.load(DEFAULT_SEARCH, [], num_samples=2, time_budget_min=30)
    assert len({tj.settings_digest("v1"), other.settings_digest("v1"), longer.settings_digest("v1")}) == 3
    marker = tmp_path / "s.mtcore.json"
    driver._check_resumable(marker, "s", tj.settings_digest("v1"))  # no marker: a search of an older mtcore
    marker.write_text(json.dumps({"settings": tj.settings_digest("v1"), "ended": None}))
    driver._check_resumable(marker, "s", tj.settings_digest("v1"))
    with pytest.raises(TuneError, match="started with other settings"):
        driver._check_resumable(marker, "s", longer.settings_digest("v1"))
    marker.write_text(json.dumps({"settings": tj.settings_digest("v1"), "ended": "budget"}))
    with pytest.raises(TuneError, match="ended on its time budget.*--overwrite"):
        driver._check_resumable(marker, "s", tj.settings_digest("v1"))


def test_search_settings_from_the_command_line():
    """`job.run_name=x` pointed at search.name, which the command line refused: every search setting is an override."""
    tj = TuneJob.load(TINY, ["search.name=mine", "search.asha.grace_period=3", "search.start_from_base=true",
                             "search.register_as=2024", "train.max_steps=20"])
    assert (tj.search.name, tj.search.asha.grace_period, tj.search.start_from_base) == ("mine", 3, True)
    assert tj.search.register_as == "2024" and tj.base.run.train.max_steps == 20
    with pytest.raises(ConfigError, match=r"unknown `search` key\(s\) \['nmae'\]"):
        TuneJob.load(TINY, ["search.nmae=x"])
    with pytest.raises(ConfigError, match="--search-space"):
        TuneJob.load(TINY, ["search.space.model.heads=4"])
    with pytest.raises(ConfigError, match="`search.start_from_base` must be true or false"):
        TuneJob.load(TINY, ["search.start_from_base=maybe"])


@pytest.mark.parametrize("override, field, expected", [
    ("search.register_as=-", "register_as", "-"),  # "do not register": YAML made it '[None]'
    ("search.register_as=no", "register_as", "no"),  # 'False'
    ("search.experiment=on", "experiment", "on"),  # 'True'
    ("search.name=007", "name", "007"),
    ("search.start_from_base=0", "start_from_base", False),  # refused, where train.bf16=0 was accepted
    ("search.start_from_base=yes", "start_from_base", True),
    ("search.time_budget_min=1e1", "time_budget_min", 10.0),
])
def test_search_overrides_take_the_type_their_field_declares(override, field, expected):
    value = getattr(TuneJob.load(TINY, [override]).search, field)
    assert value == expected and type(value) is type(expected)


def test_an_override_of_a_searched_key_says_what_it_does(caplog):
    with caplog.at_level("WARNING", logger="mtcore.distributed.tune.space"):
        TuneJob.load(TINY, ["train.max_steps=20"])
    assert not caplog.records
    with caplog.at_level("WARNING", logger="mtcore.distributed.tune.space"):
        TuneJob.load(TINY, ["model.heads=4"])
    assert "model.heads is searched (choice [2, 4, 8]): the override changes no trial" in caplog.text


def test_a_tie_of_dev_bleu_goes_to_the_lower_dev_loss():
    from mtcore.distributed.tune.results import TrialRow, best_key

    def row(tid, bleu, loss):
        return TrialRow(tid, {}, "COMPLETED", 8, bleu, None, 1.0, "ckpt", None, best_dev_loss=loss)

    rows = [row("0", 0.0, 4.58), row("1", 0.0, 4.09), row("2", 0.0, float("nan")), row("3", 0.0, 4.41)]
    assert max(rows, key=best_key).trial_id == "1"
    assert max(rows + [row("4", 0.5, 5.0)], key=best_key).trial_id == "4"  # BLEU first
    # a search whose trials pick their checkpoint by dev loss (train.best_metric=loss) ranks them by it too
    loss_first = [row("5", 20.0, 3.0), row("6", 19.0, 2.5), row("7", 21.0, float("nan"))]
    assert max(loss_first, key=lambda r: best_key(r, "loss")).trial_id == "6"
    assert max(loss_first, key=best_key).trial_id == "7"


def test_resource_flags_restated_at_their_defaults_name_the_same_search():
    """`--resume --concurrent-trials 1` (or --workers-per-trial 2) on 2 CPUs, the values the plan had chosen: the
    search had another name, and --resume said there was nothing to continue."""
    from mtcore.distributed.tune.resources import plan_resources

    plain = TuneJob.load(DEFAULT_SEARCH, [], num_samples=3)
    restated = TuneJob.load(DEFAULT_SEARCH, [], num_samples=3, concurrent_trials=1, workers_per_trial=2)
    plans = [plan_resources(tj.search, 2, 0) for tj in (plain, restated)]
    assert plain.search_name("v1", plans[0]) == restated.search_name("v1", plans[1])
    assert plain.settings_digest("v1", plans[0]) == restated.settings_digest("v1", plans[1])
    one = TuneJob.load(DEFAULT_SEARCH, [], num_samples=3, workers_per_trial=1)  # 1 worker: another batch per step
    assert one.search_name("v1", plan_resources(one.search, 2, 0)) != plain.search_name("v1", plans[0])


def test_cli_takes_overrides_anywhere_and_checks_the_seed(capsys):
    from mtcore.cli.train import parse_args as train_args
    from mtcore.cli.tune import parse_args as tune_args

    _, overrides = train_args(["train.max_steps=20", "--workers", "1", "job.test_limit=20", "--dry-run"])
    assert overrides[:2] == ["train.max_steps=20", "job.test_limit=20"]
    args, overrides = tune_args(["train.max_steps=20", "--num-samples", "2", "job.test_limit=20"])
    assert "job.test_limit=20" in overrides and args.num_samples == 2
    with pytest.raises(SystemExit):
        train_args(["--average", "1"])  # the mean of one snapshot is no average
    assert "--average 1" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="search.seed"):
        SearchConfig(seed=-1)


@pytest.mark.parametrize("overrides, space, message", [
    (["job.workers=1"], None, "job.workers is set per trial by the search; use --workers-per-trial"),
    (["job.run_name=mine", "job.experiment=x"], None, "job.run_name, job.experiment is set per trial by the search"),
    ([], "train.lr_scale: {loguniform: [1e-1, 2]}\n", None),  # 1e-1, text to YAML 1.1, is the number it means
    ([], "train.lr_scale: {loguniform: [.nan, 2]}\n", "loguniform needs [low, high] numbers"),
    # --overwrite deletes runs/ray_tune/NAME: `..` deleted the whole workspace; `a/b` failed after Ray had started
    (["search.name=.."], None, "`search.name` '..': a search name is one folder name"),
    (["search.name=a/b"], None, "`search.name` 'a/b': a search name is one folder name"),
    (["search.experiment="], None, "`search.experiment` is empty"),  # an MlflowException traceback after Ray started
    # a range of 137 integers had only its ends checked: most of its values failed their trials
    ([], "model.d_model: {randint: [64, 200]}\n", "search space `model.d_model`: value 65 is not allowed"),
])
def test_search_settings_a_review_found_accepted_or_refused_wrongly(tmp_path, overrides, space, message):
    from mtcore.config import ConfigError
    from mtcore.distributed.tune.space import TuneJob

    path = None
    if space is not None:
        path = tmp_path / "space.yaml"
        path.write_text(space)
    if message is None:
        job = TuneJob.load(Path(__file__).resolve().parents[1] / "experiments/configs/tune_tiny.yaml", overrides, space_file=path)
        assert job.search.space[0].values == (0.1, 2)
        return
    with pytest.raises(ConfigError, match=re.escape(message)):
        TuneJob.load(Path(__file__).resolve().parents[1] / "experiments/configs/tune_tiny.yaml", overrides, space_file=path)


def test_a_search_that_could_not_run_as_asked_is_refused_before_it_starts(capsys):
    """Optuna crashed (a traceback, a FAILED parent and a leftover tuner.pkl) on a base job outside its space; ASHA
    with its first rung past the last step stopped nothing, silently; --resume --overwrite was accepted."""
    from mtcore.distributed.tune.driver import check_searcher
    from mtcore.distributed.tune.space import TuneJob, TuneError

    tiny = Path(__file__).resolve().parents[1] / "experiments/configs/tune_tiny.yaml"
    outside = TuneJob.load(tiny, ["search.search=optuna", "search.start_from_base=true", "model.heads=1"])
    with pytest.raises(TuneError, match=r"the base job's model.heads=1 is outside the search space's choice \[2, 4, 8\]"):
        check_searcher(outside)
    check_searcher(TuneJob.load(tiny, ["search.search=optuna", "search.start_from_base=true"]))  # heads 4: inside
    with pytest.raises(TuneError, match=r"first rung .*step 30.* is not before train.max_steps \(24\)"):
        check_searcher(TuneJob.load(tiny, ["search.asha.grace_period=30"]))
    check_searcher(TuneJob.load(tiny, ["search.asha.grace_period=30", "search.scheduler=fifo"]))
    from mtcore.cli.tune import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--resume", "--overwrite"])
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize("asha, message", [
    ({"grace_period": "100"}, "`search.asha.grace_period` must be an integer"),
    ({"reduction_factor": 2.5}, "`search.asha.reduction_factor` must be an integer"),
    ({"grace_period": 100, "max_t": 50}, "`search.asha.max_t` (50) is below `grace_period` (100)"),
])
def test_asha_settings_are_checked(asha, message):
    from mtcore.config import ConfigError
    from mtcore.distributed.tune.space import AshaConfig

    with pytest.raises(ConfigError, match=re.escape(message)):
        AshaConfig(**asha)


def test_a_search_time_budget_must_be_finite():
    from mtcore.config import ConfigError
    from mtcore.distributed.tune.space import SearchConfig

    with pytest.raises(ConfigError, match="must be a finite number"):
        SearchConfig.from_dict({"time_budget_min": float("nan")})


def test_halving_rungs_and_cohorts():
    from mtcore.distributed.tune.halving import halving_rungs, promoted_count

    assert halving_rungs(200, 4, 799) == [200]  # the last step is no rung: a trial there has ended
    assert halving_rungs(100, 3, 799) == [100, 300]
    assert halving_rungs(8, 2, 15) == [8]
    assert halving_rungs(150, 2, 799, validate_every=100) == [200, 300, 600]  # moved to the validations that judge them
    assert halving_rungs(200, 4, 799, validate_every=500) == [500]  # 800 would pause every trial before its test
    assert [promoted_count(n, 4) for n in (12, 7, 3, 1)] == [3, 1, 1, 1]  # ⌊n/rf⌋, never none


def test_halving_is_refused_with_a_searcher_that_would_never_start_a_second_trial():
    tj = TuneJob.load(DEFAULT_SEARCH, []).with_overrides(scheduler="halving", search="optuna")
    with pytest.raises(TuneError, match="halving works with --search random"):
        driver.check_searcher(tj)


def test_dry_run_says_how_halving_cuts():
    tj = TuneJob.load(DEFAULT_SEARCH, ["search.asha.grace_period=200", "search.asha.reduction_factor=4"]).with_overrides(
        scheduler="halving")
    said = driver.describe_scheduler(tj)
    assert said.startswith("halving on dev/loss: every trial waits at each rung until all have reached it, then the best 1/4")
    assert "at steps 200 (of 800" in said


class _Trial:
    """What the halving rule reads of a Tune trial."""

    def __init__(self, trial_id: str, status: str = "PENDING"):
        self.trial_id, self.status, self.is_saving = trial_id, status, False

    def set_status(self, status: str) -> None:
        self.status = status


class _Controller:
    def __init__(self):
        self.stopped = []

    def stop_trial(self, trial):
        self.stopped.append(trial.trial_id)
        trial.status = "TERMINATED"


def test_halving_decides_a_rung_once_its_whole_cohort_is_there_whatever_the_order(monkeypatch):
    from mtcore.distributed.tune import halving
    from mtcore.distributed.tune.halving import sync_halving

    monkeypatch.setattr(halving, "RESTART_AFTER_S", 0.0)  # a paused trial's old actor is not waited for here

    sched = sync_halving(time_attr="step", metric="dev/loss", mode="min", rungs=[2, 4], reduction_factor=2, expected=4,
                         max_running=1)
    ctl, trials = _Controller(), [_Trial(f"t{i}") for i in range(4)]
    losses = {"t0": 5.0, "t1": 3.0, "t2": float("nan"), "t3": 4.0}  # a nan (a diverged trial) ranks last
    decisions = []
    for t in trials:  # the searcher creates a trial only while a slot is free
        assert sched.may_start_another()
        sched.on_trial_add(ctl, t)
        assert sched.choose_trial_to_run(ctl) is t and not sched.may_start_another()
        t.status = "RUNNING"
        assert sched.on_trial_result(ctl, t, {"step": 1, "dev/loss": 9.0}) == "CONTINUE"
        decisions.append(sched.on_trial_result(ctl, t, {"step": 2, "dev/loss": losses[t.trial_id]}))
        if decisions[-1] == "PAUSE":
            t.status = "PAUSED"
            assert sched.may_start_another()
    assert decisions == ["PAUSE", "PAUSE", "PAUSE", "CONTINUE"]  # t3, the last to arrive, is among the best 2
    assert ctl.stopped == ["t0", "t2"]
    assert sched.choose_trial_to_run(ctl) is None  # t3 runs: t1 waits for its slot
    assert sched.on_trial_result(ctl, trials[3], {"step": 4, "dev/loss": 2.0}) == "PAUSE"  # rung 4 waits for t1
    trials[3].status = "PAUSED"
    assert sched.choose_trial_to_run(ctl) is trials[1]  # promoted at rung 2: it restarts
    trials[1].status = "RUNNING"
    assert sched.on_trial_result(ctl, trials[1], {"step": 4, "dev/loss": 2.5}) == "STOP"  # t3 is better at rung 4
    assert sched.choose_trial_to_run(ctl) is trials[3]


def test_halving_does_not_wait_for_a_trial_that_failed_or_ended_before_a_resume(monkeypatch):
    from mtcore.distributed.tune import halving
    from mtcore.distributed.tune.halving import sync_halving

    monkeypatch.setattr(halving, "RESTART_AFTER_S", 0.0)

    sched = sync_halving(time_attr="step", metric="dev/bleu", mode="max", rungs=[2], reduction_factor=2, expected=3,
                         max_running=1)
    ctl = _Controller()
    done, a, b = _Trial("done", "TERMINATED"), _Trial("a", "RUNNING"), _Trial("b")
    for t in (done, a, b):
        sched.on_trial_add(ctl, t)
    assert sched.on_trial_result(ctl, a, {"step": 2, "dev/bleu": 10.0}) == "PAUSE"
    a.status, b.status = "PAUSED", "RUNNING"
    sched.on_trial_error(ctl, b)  # b crashed before the rung: the rung is decided among those that reached it
    assert ctl.stopped == [] and sched.choose_trial_to_run(ctl) is a


def test_a_resumed_halving_search_keeps_its_rungs_decisions_and_restarts_one_trial_at_a_time(monkeypatch):
    """Tune saves no scheduler and restores every unfinished trial as PENDING, which would start them all at once (a
    trial's driver holds no CPU) and judge them again; the decisions travel in the searcher's state instead."""
    from mtcore.distributed.tune import halving
    from mtcore.distributed.tune.halving import sync_halving

    def scheduler():
        return sync_halving(time_attr="step", metric="dev/bleu", mode="max", rungs=[2], reduction_factor=2,
                            expected=2, max_running=1)

    monkeypatch.setattr(halving, "RESTART_AFTER_S", 3600.0)
    before, ctl = scheduler(), _Controller()
    a, b = _Trial("a"), _Trial("b")
    for t, bleu in ((a, 20.0), (b, 10.0)):
        before.on_trial_add(ctl, t)
        t.status = "RUNNING"
        before.on_trial_result(ctl, t, {"step": 2, "dev/bleu": bleu})
        t.status = "PAUSED" if t is a else "TERMINATED"
    assert ctl.stopped == [] and before.choose_trial_to_run(ctl) is None  # a's old actor may still be training
    monkeypatch.setattr(halving, "RESTART_AFTER_S", 0.0)
    assert before.choose_trial_to_run(ctl) is a

    after = scheduler()  # --resume: a fresh object, then the saved state, then the trials as Tune restores them
    after.load_state(json.loads(json.dumps(before.state())))
    a2, b2 = _Trial("a", "PENDING"), _Trial("b", "TERMINATED")
    for t in (a2, b2):
        after.on_trial_add(ctl, t)
    assert a2.status == "PAUSED" and after.may_start_another()  # paused: Tune starts it only when chosen
    assert after.choose_trial_to_run(ctl) is a2  # promoted before the interruption: restarted, not judged again
    a2.status = "RUNNING"
    assert after.on_trial_result(ctl, a2, {"step": 4, "dev/bleu": 21.0}) == "CONTINUE"
