"""Back-translation end to end on a tiny corpus: every stage on a local Ray instance, reuse, tags, reconciliation."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mtcore.backtranslation import BTConfig, BTError, run_backtranslation
from mtcore.backtranslation.pipeline import STAGES, WEAK_REVERSE_BLEU
from mtcore.runs import resolve_data
from mtcore.data.corpus import write_parquet
from mtcore.embedding.encoder import EncoderConfig
from mtcore.embedding.train import EncoderTrainConfig, train_encoder
from mtcore.nmt.tokenizer import BT_TAG
from mtcore.nmt.training import toy_pairs


@pytest.fixture(scope="module")
def bt_inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("bt")
    pairs = toy_pairs(360, seed=3)
    real, mono = pairs[:260], pairs[260:]
    noisy = real + [("Open the file", "Open the file"), ("", "trống")]  # an untranslated copy and an empty side
    corpus = pa.table({"src": [s for s, _ in noisy], "tgt": [t for _, t in noisy], "origin": ["toy"] * len(noisy),
                       "id": [f"toy{i}" for i in range(len(noisy))]})
    write_parquet(corpus, root / "corpus.parquet")
    (root / "mono.vi").write_text("\n".join(t for _, t in mono) + "\n\n", encoding="utf-8")
    enc_cfg = EncoderTrainConfig(model=EncoderConfig(vocab_size=400, d_model=32, dim=32, d_ff=64), batch_size=64, epochs=4,
                                 warmup=5, heldout=20, log_every=10)
    train_encoder(corpus.slice(0, 260), root / "encoder", enc_cfg, track=False)
    return root


def config(root, out, **kw):
    return BTConfig(**{"corpus": str(root / "corpus.parquet"), "mono": str(root / "mono.vi"), "output": str(out),
                       "encoder": str(root / "encoder"), "reverse_preset": "tiny", "reverse_steps": 40, "reverse_vocab": 400, "max_mono": 60,
                       "ratio": 1.0, **kw})


def test_tiny_end_to_end_then_reuse(ray_local, mlflow_uri, tmp_path, monkeypatch, bt_inputs, caplog, capsys):
    monkeypatch.setenv("MTCORE_HOME", str(tmp_path / "runs"))
    out = tmp_path / "bt"
    result = run_backtranslation(config(bt_inputs, out, mode="noised", tag=True))
    assert [s["stage"] for s in result.stages] == list(STAGES) and result.reused == []
    warned = any("the reverse model reached dev BLEU" in r.getMessage() for r in caplog.records)
    assert warned == (result.reverse_dev_bleu < WEAK_REVERSE_BLEU)  # a weak reverse model is said, a good one not

    report = json.loads((out / "report.json").read_text())
    for stage in report["stages"]:  # every stage reconciles
        assert stage["input"] == stage["kept"] + sum(stage["rejected"].values()), stage
    by_name = {s["stage"]: s for s in report["stages"]}
    assert by_name["clean"]["input"] == 262 and by_name["clean"]["rejected_total"] >= 2
    assert by_name["select_mono"]["input"] == 101 and by_name["select_mono"]["kept"] == 60  # 101 lines, one blank
    assert by_name["select_mono"]["rejected"]["blank"] == 1
    assert by_name["backtranslate"]["kept"] == 60
    assert by_name["synthetic_filter"]["input"] == 60
    assert "threshold" in by_name["align_filter"] and "cosine_threshold" in by_name["synthetic_filter"]  # not counts alone

    table = pq.read_table(result.augmented)
    synthetic = table.filter(table["synthetic"])
    real = table.filter(pa.compute.invert(table["synthetic"]))
    assert len(synthetic) == by_name["synthetic_filter"]["kept"] and len(real) == by_name["align_filter"]["kept"]
    assert all(s.startswith(f"{BT_TAG} ") for s in synthetic["src"].to_pylist())  # tag on every synthetic source
    assert not any(BT_TAG in s for s in real["src"].to_pylist())  # and on no real one
    assert len(set(table["id"].to_pylist())) == len(table)
    assert all(i.startswith("bt:") and o.startswith("bt:") for i, o in zip(synthetic["id"].to_pylist(), synthetic["origin"].to_pylist()))

    again = run_backtranslation(config(bt_inputs, out, mode="noised", tag=True))
    assert again.reused == list(STAGES)  # idempotent: nothing is redone
    # The command as a user types it, every option mapped to the same settings: all reused, summary printed, text export
    from mtcore.cli.backtranslate import main as bt_main

    capsys.readouterr()
    argv = ["--corpus", str(bt_inputs / "corpus.parquet"), "--mono", str(bt_inputs / "mono.vi"), "--output", str(out),
            "--encoder", str(bt_inputs / "encoder"), "--reverse-preset", "tiny", "--reverse-steps", "40",
            "--reverse-vocab", "400", "--max-mono", "60", "--ratio", "1.0", "--mode", "noised", "--tag", "--format", "tsv"]
    assert bt_main(argv) == 0
    printed = capsys.readouterr().out
    assert "augmented training set → " in printed and f"augmented set as text → {out / 'augmented.tsv'}" in printed
    assert all(f"{stage} (reused)" in printed for stage in STAGES) and "next: python experiments/train_transformer.py --data" in printed
    assert len((out / "augmented.tsv").read_text(encoding="utf-8").splitlines()) == len(table)
    data, lineage = resolve_data(out)  # `--data OUT` trains on the assembled set, with its lineage
    assert data == result.augmented and lineage["mlflow_run_id"] == result.mlflow_run_id and lineage["fingerprint"]

    with pytest.raises(BTError, match=r"holds a different run's artifacts \(stages \['05_backtranslate', .*05_backtranslate: .*mode: 'noised' → 'beam'"):
        run_backtranslation(config(bt_inputs, out, mode="beam", tag=False))

    # Beam instead of noise, told where the first run is: its stages up to the selected sentences are used in place
    # (the reverse model included), the translations are made here with its checkpoint.
    beam_out = tmp_path / "bt-beam"
    beam = run_backtranslation(config(bt_inputs, beam_out, mode="beam", tag=False, reuse_from=str(out)))
    shared = ["clean", "align_filter", "reverse_model", "select_mono"]
    assert beam.reused == shared and beam.reverse_model == result.reverse_model
    by_name = {s["stage"]: s for s in beam.stages}
    assert all(Path(by_name[n]["reused_from"]).parent == out for n in shared)
    assert sorted(p.name for p in beam_out.glob("0*")) == ["05_backtranslate", "06_synthetic_filter", "07_assemble"]
    assert beam.augmented.is_relative_to(beam_out) and resolve_data(beam_out)[0] == beam.augmented
    table = pq.read_table(beam.augmented)
    synthetic = table.filter(table["synthetic"])
    assert len(synthetic) > 0 and not any(BT_TAG in s for s in synthetic["src"].to_pylist())
    assert run_backtranslation(config(bt_inputs, beam_out, mode="beam", tag=False, reuse_from=str(out))).reused == list(STAGES)
    # The same rerun without --reuse-from reuses them too (it compared with no donor and made all 7 again)
    assert run_backtranslation(config(bt_inputs, beam_out, mode="beam", tag=False)).reused == list(STAGES)
    # A run reusing that one follows the chain to the stages it borrowed (it cleaned, aligned and trained again)
    chained = run_backtranslation(config(bt_inputs, tmp_path / "bt-chain", mode="beam", tag=False, reuse_from=str(beam_out)))
    assert chained.reused == list(STAGES[:-1])
    # A ratio too small for any sentence: said as such (it read "none of its sentences is left", blaming the text)
    with pytest.raises(BTError, match=r"--ratio 0.001 × \d+ real pairs leaves a budget of 0 sentences"):
        run_backtranslation(config(bt_inputs, tmp_path / "bt-tiny-ratio", mode="beam", tag=False, reuse_from=str(out), ratio=0.001))
    # ... and a run that stopped (an error, Ctrl-C) remembers what it borrowed: a rerun without --reuse-from takes it
    from mtcore.backtranslation.stages import recorded_donor

    assert recorded_donor(tmp_path / "bt-tiny-ratio") == str(out.absolute())
    # The first run's reverse model changes (a rerun there): what this run made from it is made again.
    marker = out / "03_reverse_model" / "_stage.json"
    body = json.loads(marker.read_text())
    body["report"]["dev_bleu"] = -1.0
    marker.write_text(json.dumps(body))
    assert run_backtranslation(config(bt_inputs, beam_out, mode="beam", tag=False, reuse_from=str(out))).reused == shared
    # --overwrite with other settings: every stage made again, under a new MLflow run (the old one keeps its figures)
    over = run_backtranslation(config(bt_inputs, out, mode="beam", tag=False, overwrite=True))
    assert over.reused == [] and over.mlflow_run_id and over.mlflow_run_id != result.mlflow_run_id
    assert resolve_data(out)[1]["mlflow_run_id"] == over.mlflow_run_id
    # its reverse model is its own run, a child of this run (it was shared by every output with those settings)
    import mlflow

    reverse = json.loads((out / "03_reverse_model" / "_stage.json").read_text())["report"]
    tags = mlflow.MlflowClient(mlflow_uri).get_run(reverse["mlflow_run_id"]).data.tags
    assert tags["mlflow.parentRunId"] == over.mlflow_run_id and tags["mlflow.runName"].startswith("bt-reverse-vi-en-")
    # The output folder moved, then resumed after select_mono: it translates with the reverse model where it is now
    # (the stage's report held the old absolute path: a Ray traceback, or the wrong model had one stood there).
    moved = tmp_path / "bt-moved"
    shutil.move(out, moved)
    for leftover in ("05_backtranslate", "06_synthetic_filter", "07_assemble"):
        shutil.rmtree(moved / leftover)
    resumed = run_backtranslation(config(bt_inputs, moved, mode="beam", tag=False))
    assert resumed.reused == shared and resumed.reverse_model == str(moved / "03_reverse_model" / "checkpoint")
    assert json.loads((moved / "report.json").read_text())["reverse_model"]["checkpoint"] == resumed.reverse_model


def test_inputs_count_by_contents_and_outputs_by_folder(tmp_path, mlflow_uri, bt_inputs):
    """A corpus cut in place is another input; two outputs named alike keep two MLflow runs."""
    corpus = tmp_path / "real.tsv"
    corpus.write_text("".join(f"{s}\t{t}\n" for s, t in toy_pairs(50)), encoding="utf-8")
    cfg = BTConfig(**{**config(bt_inputs, tmp_path / "a" / "bt1").__dict__, "corpus": str(corpus)})
    before = cfg.stage_settings()
    corpus.write_text("".join(f"{s}\t{t}\n" for s, t in toy_pairs(10)), encoding="utf-8")
    after = cfg.stage_settings()
    assert before["clean"] != after["clean"] and before["select_mono"] != after["select_mono"]
    moved = tmp_path / "elsewhere" / "real.tsv"  # the same file at another path: the same input
    moved.parent.mkdir()
    shutil.copy(corpus, moved)
    assert BTConfig(**{**cfg.__dict__, "corpus": str(moved)}).stage_settings() == after
    encoder = tmp_path / "encoder"  # the user's encoder retrained in place: another filter, the same cleaning
    shutil.copytree(bt_inputs / "encoder", encoder)
    own = BTConfig(**{**cfg.__dict__, "encoder": str(encoder)})
    before = own.stage_settings()
    (encoder / "config.json").write_text((encoder / "config.json").read_text() + "\n")
    after = own.stage_settings()
    assert before["clean"] == after["clean"] and before["align_filter"] != after["align_filter"]
    heldout = tmp_path / "heldout.tsv"  # the cleaning's TestOverlap set: edited, the corpus is cleaned again
    heldout.write_text("Open the file\tMở tập tin\n", encoding="utf-8")
    rules = tmp_path / "rules.yaml"
    rules.write_text(f"- TestOverlap: {{paths: [{heldout}]}}\n", encoding="utf-8")
    with_rules = BTConfig(**{**cfg.__dict__, "clean_config": str(rules)})
    before = with_rules.stage_settings()
    heldout.write_text("Save the file\tLưu tập tin\n", encoding="utf-8")
    assert with_rules.stage_settings()["clean"] != before["clean"]
    # A model URI counts by the checkpoint it resolved to: `models:/NAME/latest` after a new version is registered
    # is another reverse model, though its string is the same.
    by_uri = BTConfig(**{**cfg.__dict__, "reverse_model": "models:/mt-vi-en/latest"})
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    for version, text in ((v1, "one"), (v2, "two")):
        version.mkdir()
        (version / "model.pt").write_text(text)
    first, second = by_uri.stage_settings(reverse_dir=v1), by_uri.stage_settings(reverse_dir=v2)
    assert first["select_mono"] == second["select_mono"] and first["reverse_model"] != second["reverse_model"]
    assert second["backtranslate"] != first["backtranslate"]
    # Settings that make no other reverse model make no other stage: its training settings beside a given model,
    # its minutes beside a step count (each redid the back-translation for an identical model)
    given = by_uri.stage_settings(reverse_dir=v1)
    for change in ({"reverse_minutes": 3.0}, {"reverse_preset": "mini"}, {"reverse_steps": 99}):
        assert BTConfig(**{**by_uri.__dict__, **change}).stage_settings(reverse_dir=v1) == given
    stepped = BTConfig(**{**cfg.__dict__, "reverse_steps": 20})
    assert BTConfig(**{**stepped.__dict__, "reverse_minutes": 3.0}).stage_settings() == stepped.stage_settings()
    assert BTConfig(**{**stepped.__dict__, "reverse_steps": 30}).stage_settings()["reverse_model"] != \
        stepped.stage_settings()["reverse_model"]
    from mtcore.backtranslation.pipeline import _open_run

    other = BTConfig(**{**cfg.__dict__, "output": str(tmp_path / "b" / "bt1")})
    first, second = _open_run(cfg), _open_run(other)
    assert first and second and first != second
    assert _open_run(cfg) == first  # a rerun into the same folder continues its run


def test_bad_inputs_fail_before_work(tmp_path, bt_inputs):
    with pytest.raises(BTError, match="--mono: .*missing.vi not found"):
        run_backtranslation(BTConfig(**{**config(bt_inputs, tmp_path / "o1").__dict__, "mono": str(tmp_path / "missing.vi")}))
    empty = tmp_path / "empty.vi"
    empty.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(BTError, match="holds no non-empty sentence"):
        run_backtranslation(BTConfig(**{**config(bt_inputs, tmp_path / "o2").__dict__, "mono": str(empty)}))
    with pytest.raises(BTError, match="--reverse-model .*directory not found"):
        run_backtranslation(BTConfig(**{**config(bt_inputs, tmp_path / "o3").__dict__, "reverse_model": str(tmp_path / "nope")}))
    import gzip

    (tmp_path / "mono.vi.xz").write_bytes(b"\xfd7zXZ\x00")
    with pytest.raises(BTError, match=r"--mono: .*mono.vi.xz: compressed in a format mtcore does not read"):
        run_backtranslation(BTConfig(**{**config(bt_inputs, tmp_path / "o6").__dict__, "mono": str(tmp_path / "mono.vi.xz")}))
    for lang in ("en", "vi"):  # a gzip'd Moses prefix is a corpus (it was "--corpus: … not found"): the next check speaks
        (tmp_path / f"pair.{lang}.gz").write_bytes(gzip.compress(b"x\n"))
    with pytest.raises(BTError, match="--mono: .*missing.vi not found"):
        run_backtranslation(BTConfig(**{**config(bt_inputs, tmp_path / "o7").__dict__, "corpus": str(tmp_path / "pair"),
                                        "mono": str(tmp_path / "missing.vi")}))
    with pytest.raises(BTError, match=r"--corpus: .*nothing: file not found \(nor nothing.en \+ nothing.vi\)"):
        run_backtranslation(BTConfig(**{**config(bt_inputs, tmp_path / "o8").__dict__, "corpus": str(tmp_path / "nothing")}))
    with pytest.raises(BTError, match="--reuse-from: .*nope holds no back-translation run"):
        run_backtranslation(BTConfig(**{**config(bt_inputs, tmp_path / "o4").__dict__, "reuse_from": str(tmp_path / "nope")}))
    with pytest.raises(BTError, match="--mode must be one of"):
        BTConfig(mode="greedy")
    with pytest.raises(BTError, match="--align-score must be one of"):
        BTConfig(align_score="labse")
    # A user's encoder has no pair classifier until they train one: said before the cleaning runs.
    no_classifier = BTConfig(**{**config(bt_inputs, tmp_path / "o5").__dict__, "align_score": "classifier"})
    with pytest.raises(BTError, match="--align-score classifier: .*no pair classifier.*--classifier-only"):
        run_backtranslation(no_classifier)
    assert not (tmp_path / "o5" / "01_clean").exists()


def test_bt_effect_cli_tiny(ray_local, mlflow_uri, tmp_path, monkeypatch, capsys, bt_inputs):
    import importlib.util

    import mlflow

    monkeypatch.setenv("MTCORE_HOME", str(tmp_path / "runs"))
    spec = importlib.util.spec_from_file_location("bt_effect", Path(__file__).resolve().parent.parent / "experiments/bt_effect.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    held_out = toy_pairs(60, seed=11)
    for name, rows in (("dev", held_out[:30]), ("test", held_out[30:])):
        (tmp_path / f"{name}.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in rows), encoding="utf-8")
    # The tiny reverse model stops at its 40 steps, not on the clock: with 3 seconds (as before) a loaded
    # machine trained it so little that the synthetic filter rejected all of its output (CI, 2026-11-24).
    args = ["--aligned", str(bt_inputs / "corpus.parquet"), "--share", "0.8", "--steps", "4", "--validate-every", "2",
            "--reverse-steps", "30", "--max-mono", "40", "--preset", "tiny", "--reverse-preset", "tiny", "--vocab", "400",
            "--test-limit", "10", "--dev-limit", "10", "--seeds", "0", "--best-metric", "bleu", "--variants", "real,beam_tagged", "--encoder", str(bt_inputs / "encoder"),
            "--dev", str(tmp_path / "dev.tsv"), "--test", str(tmp_path / "test.tsv"), "--output", str(tmp_path / "effect")]
    assert module.main(args) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    rows = {line.split()[0]: line.split() for line in lines if line.startswith(("real ", "beam_tagged ")) and "seed" not in line}
    assert set(rows) == {"real", "beam_tagged"}
    assert rows["real"][2] == "0" and int(rows["beam_tagged"][2].replace(",", "")) > 0  # synthetic pairs used
    # The tagged variant takes the reverse model and the beam translations of the first (untagged) run.
    tagged = json.loads(next((tmp_path / "effect").glob("bt-beam-tagged-*/report.json")).read_text())
    assert set(tagged["reused_stages"]) == {"clean", "align_filter", "reverse_model", "select_mono", "backtranslate"}
    assert rows["real"][7] == "+0.00"  # the gain is measured against real only
    assert "reverse model (vi→en, tiny): 30 steps" in out  # --reverse-steps, not the tiny preset's 40
    assert "synthetic filter, beam_tagged: kept" in out
    runs = mlflow.search_runs(experiment_names=["bt_effect"], output_format="list")
    names = {r.info.run_name for r in runs}
    assert {n.rsplit("-", 1)[0] for n in names} >= {"bt-effect-real-s0-tiny", "bt-effect-beam_tagged-s0-tiny"}
    forward = [r for r in runs if r.info.run_name.startswith("bt-effect-")]
    assert forward and all("test/bleu" in r.data.metrics and r.data.params["train.best_metric"] == "bleu" for r in forward)
    finished = [json.loads(line) for line in (tmp_path / "effect" / "results.jsonl").read_text().splitlines()]
    assert [(r["variant"], r["seed"]) for r in finished] == [("real", 0), ("beam_tagged", 0)]
    assert all(r["steps"] <= 4 for r in finished)
    # Run again: the finished rows are reused, nothing is trained again.
    assert module.main(args) == 0
    assert "real seed 0: done earlier" in capsys.readouterr().out
    assert len(mlflow.search_runs(experiment_names=["bt_effect"], output_format="list")) == len(runs)
    with pytest.raises(SystemExit):  # an unknown variant is refused before any work
        module.main(args[:-2] + ["--variants", "z_magic"])
    with pytest.raises(SystemExit):  # and so is a comparison without its baseline
        module.main(args[:-2] + ["--variants", "noised"])


def test_bt_effect_resumes_only_rows_of_the_same_settings_input_and_code(tmp_path, bt_inputs):
    from mtcore.backtranslation.experiment import EffectConfig, append_row, forward_job, read_results

    aligned = str(bt_inputs / "corpus.parquet")
    cfg = EffectConfig(preset="tiny")
    key = cfg.fingerprint(aligned)
    assert EffectConfig(preset="tiny", seeds=(3,), variants=("real",)).fingerprint(aligned) == key  # what runs, not how
    other = EffectConfig(preset="tiny", best_metric="bleu").fingerprint(aligned)
    assert other != key and EffectConfig(preset="tiny", validate_every=7).fingerprint(aligned) != key
    assert key[:8] in forward_job(cfg, "real", 0, aligned, key).job.run_name  # other settings: other MLflow runs
    assert other[:8] in forward_job(cfg, "real", 0, aligned, other).job.run_name

    path = tmp_path / "results.jsonl"
    append_row(path, {"variant": "real", "seed": 0, "fingerprint": key})
    append_row(path, {"variant": "real", "seed": 1, "fingerprint": other})
    with path.open("a") as f:
        f.write('{"variant": "beam", "se')  # a row cut by a kill
    append_row(path, {"variant": "beam", "seed": 0, "fingerprint": key})  # ends the cut line first
    assert sorted(read_results(path, key)) == [("beam", 0), ("real", 0)]
    assert sorted(read_results(path, other)) == [("real", 1)]


def test_bt_effect_summary_is_mean_spread_and_gain_over_real_only():
    from mtcore.backtranslation.experiment import summarize

    rows = [{"variant": v, "seed": s, "synthetic_pairs": n, "steps": st, "dev_bleu": d, "test_bleu": b, "test_chrf": c}
            for v, s, n, st, d, b, c in [("real", 0, 0, 900, 10.0, 12.0, 30.0), ("real", 1, 0, 1100, 11.0, 13.0, 31.0),
                                         ("beam_tagged", 0, 500, 1500, 12.0, 14.0, 33.0), ("beam_tagged", 1, 500, 1300, 12.0, 15.0, 34.0)]]
    summary = {r["variant"]: r for r in summarize(rows)}
    assert summary["real"]["test_bleu"] == 12.5 and summary["real"]["spread"] == 0.5 and summary["real"]["gain"] == 0.0
    assert summary["beam_tagged"]["test_bleu"] == 14.5 and summary["beam_tagged"]["gain"] == 2.0
    assert summary["beam_tagged"]["steps"] == 1400 and summary["beam_tagged"]["seeds"] == 2


def test_reverse_model_with_a_foreign_vocabulary_is_refused(tmp_path, bt_inputs):
    import torch

    from mtcore.nmt.checkpoint import save_checkpoint
    from mtcore.config import ModelConfig, TrainConfig
    from mtcore.nmt.model import build_model
    from mtcore.nmt.tokenizer import train_tokenizer

    english = [f"open file number {i} and save the {w} document" for i in range(200) for w in ("old", "new")]
    tokenizer = train_tokenizer(english, tmp_path / "spm.model", vocab_size=320)
    torch.manual_seed(0)
    cfg = ModelConfig.preset("tiny", src_lang="vi", tgt_lang="en")
    save_checkpoint(tmp_path / "ckpt", build_model(cfg, vocab_size=tokenizer.vocab_size), tokenizer, train_cfg=TrainConfig(), step=1)
    with pytest.raises(BTError, match=r"vocabulary does not match the monolingual text \(\d+% of pieces"):
        run_backtranslation(BTConfig(**{**config(bt_inputs, tmp_path / "o").__dict__, "reverse_model": str(tmp_path / "ckpt")}))
    assert not (tmp_path / "o" / "01_clean").exists()  # refused before any stage ran


def test_synthetic_filter_applies_the_cleaning_rules(tmp_path, bt_inputs):
    """Degenerate back-translations meet the cleaning stage's own rules (reason-coded, counts reconciled);
    good synthetic pairs pass on to the cosine filter (here with a threshold that keeps them all)."""
    from mtcore.backtranslation.pipeline import stage_synthetic_filter
    from mtcore.backtranslation.stages import StageDir

    good = toy_pairs(12, seed=5)
    bad = [("Move the format format format format format format format.", "Di chuyển định dạng sang một thư mục khác."),
           ("", "trống rỗng"), ("con chó nhỏ ở đây", "con chó nhỏ ở đây")]
    rows = good + bad
    translated = tmp_path / "translated.parquet"
    write_parquet(pa.table({"synthetic": [s for s, _ in rows], "text": [t for _, t in rows],
                            "origin": ["mono"] * len(rows), "id": [f"m{i}" for i in range(len(rows))]}), translated)
    stage = StageDir(tmp_path, "06_synthetic_filter", {"t": 1})
    report = stage_synthetic_filter(config(bt_inputs, tmp_path / "bt"), stage, translated, threshold=-1.0)
    rejects = pq.read_table(stage.path / "rejects.parquet").to_pylist()
    assert {r["id"]: r["reason"] for r in rejects} == {"m12": "repetition", "m13": "empty", "m14": "untranslated"}
    kept = pq.read_table(stage.path / "kept.parquet")
    assert kept["id"].to_pylist() == [f"m{i}" for i in range(12)]
    assert report["input"] == 15 and report["kept"] == 12 and sum(report["rejected"].values()) == 3

    # noised mode: the rules judge the translation, the kept row carries its noised copy (a noised copy that lost
    # its placeholder was a placeholder_mismatch reject before)
    noised = [("Open %s now", "Open now", "Mở %s ngay"), ("Save the file", "Save file the", "Lưu tệp")]
    write_parquet(pa.table({"synthetic": [n for _, n, _ in noised], "synthetic_clean": [c for c, _, _ in noised],
                            "text": [t for _, _, t in noised], "origin": ["mono"] * 2, "id": ["n0", "n1"]}), translated)
    stage = StageDir(tmp_path, "06_synthetic_filter_noised", {"t": 2})
    report = stage_synthetic_filter(config(bt_inputs, tmp_path / "bt2"), stage, translated, threshold=-1.0)
    assert report["kept"] == 2 and pq.read_table(stage.path / "kept.parquet")["src"].to_pylist() == ["Open now", "Save file the"]


def test_monolingual_parquet_names_its_column_as_it_likes(tmp_path):
    """A `vi` column (or one string column) is the sentences; only `text` was accepted."""
    from mtcore.backtranslation.pipeline import read_mono

    write_parquet(pa.table({"vi": ["câu một", "câu hai"], "n": [1, 2]}), tmp_path / "named.parquet")
    write_parquet(pa.table({"line": ["câu một"], "n": [1]}), tmp_path / "one.parquet")
    write_parquet(pa.table({"a": ["x"], "b": ["y"]}), tmp_path / "two.parquet")
    assert read_mono(tmp_path / "named.parquet")["text"].to_pylist() == ["câu một", "câu hai"]
    assert read_mono(tmp_path / "one.parquet")["text"].to_pylist() == ["câu một"]
    with pytest.raises(BTError, match=r"no `text` column \(columns: \['a', 'b'\]\); name"):
        read_mono(tmp_path / "two.parquet")


def test_monolingual_ids_are_line_numbers_and_blank_lines_are_counted(tmp_path, caplog):
    from mtcore.backtranslation.pipeline import read_mono

    path = tmp_path / "mono.vi"
    path.write_text("câu một\n\n   \ncâu hai\n", encoding="utf-8")
    with caplog.at_level("WARNING", logger="mtcore.backtranslation.pipeline"):
        table = read_mono(path)
    assert table["text"].to_pylist() == ["câu một", "câu hai"]
    assert table["id"].to_pylist() == ["mono.vi:1", "mono.vi:4"]  # the line in the file
    assert "2 blank line(s) or empty row(s) skipped, 2 sentences read" in caplog.text
    kept_blank = read_mono(path, keep_blank=True)  # the pipeline's reading: select_mono sets them aside as `blank`
    assert kept_blank["id"].to_pylist() == ["mono.vi:1", "mono.vi:2", "mono.vi:3", "mono.vi:4"]
    from mtcore.backtranslation.select import select_mono

    chosen = select_mono(kept_blank, pa.array([], pa.string()), pa.array([], pa.string()), 10, 0)
    assert chosen.kept["id"].to_pylist() == ["mono.vi:1", "mono.vi:4"]
    assert chosen.rejects["reason"].to_pylist() == ["blank", "blank"]
    dots = pa.table({"text": ["", "…", "câu"], "origin": ["m"] * 3, "id": ["m:1", "m:2", "m:3"]})
    chosen = select_mono(dots, pa.array([], pa.string()), pa.array([], pa.string()), 10, 0)
    assert chosen.kept["id"].to_pylist() == ["m:2", "m:3"]  # "…" shares the blank line's empty key: no duplicate
    (tmp_path / "empty.vi").write_bytes(b"")  # a 0-byte file: one line of error, not an Arrow traceback
    with pytest.raises(BTError, match="empty.vi holds no non-empty sentence"):
        read_mono(tmp_path / "empty.vi")
    folder = tmp_path / "parts"  # a folder of Parquet parts, with a null row
    write_parquet(pa.table({"text": ["một", None]}), folder / "part-0.parquet")
    write_parquet(pa.table({"text": ["hai"]}), folder / "part-1.parquet")
    assert read_mono(folder)["text"].to_pylist() == ["một", "hai"]
    write_parquet(pa.table({"text": [1, 2]}), tmp_path / "numbers.parquet")
    with pytest.raises(BTError, match="column `text` must be strings"):
        read_mono(tmp_path / "numbers.parquet")
    write_parquet(pa.table({"sentence": ["ba"]}), folder / "part-2.parquet")  # a part with another column: named, not dropped
    with pytest.raises(BTError, match="part-2.parquet: its columns differ .* in sentence, text"):
        read_mono(folder)
    (tmp_path / "broken.parquet").write_text("not parquet")
    with pytest.raises(BTError, match="broken.parquet: not readable as Parquet"):
        read_mono(tmp_path / "broken.parquet")
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "a.txt").write_text("câu\n")
    with pytest.raises(BTError, match="texts: directory holds no .parquet files"):
        read_mono(tmp_path / "texts")
    (tmp_path / "pairs.tsv").write_text("Open\tMở\nSave\tLưu\n", encoding="utf-8")  # a parallel TSV given as --mono
    with pytest.raises(BTError, match="pairs.tsv: 2 of 2 lines hold a tab, as a parallel TSV does"):
        read_mono(tmp_path / "pairs.tsv")


def test_default_outputs_lie_under_the_home_of_the_run_not_of_the_import(monkeypatch, tmp_path):
    """`--home` is read before `main` runs but after the modules are imported: the defaults must follow it."""
    from mtcore.backtranslation.experiment import EffectConfig
    from mtcore.cli.backtranslate import build_parser

    monkeypatch.setenv("MTCORE_HOME", str(tmp_path / "ws2"))
    assert BTConfig().output == str(tmp_path / "ws2" / "backtranslate")
    assert EffectConfig().output == str(tmp_path / "ws2" / "bt_effect")
    assert build_parser().parse_args([]).output == str(tmp_path / "ws2" / "backtranslate")
    assert BTConfig(output="elsewhere").output == "elsewhere"


def test_noised_back_translations_do_not_depend_on_the_batch(tmp_path):
    """Seeded per batch, a sentence's noise changed with the sentences batched beside it, and those depend on
    the number of CPUs: the same fingerprint stood for different data on another machine."""
    from types import SimpleNamespace

    import torch

    from mtcore.backtranslation.translate import translate_texts
    from mtcore.config import DecodeConfig, ModelConfig
    from mtcore.nmt.model import build_model
    from mtcore.nmt.tokenizer import train_tokenizer

    texts = ["mở tệp mới ngay", "lưu tài liệu này lại", "đóng cửa sổ hiện tại", "xoá tệp đã chọn đi", "in trang này ra",
             "tìm kiếm trong tệp"]
    tok = train_tokenizer(texts * 20 + ["open the new file now", "save this document"] * 20, tmp_path / "spm.model",
                          vocab_size=400)
    torch.manual_seed(0)
    ckpt = SimpleNamespace(model=build_model(ModelConfig.preset("tiny", dropout=0.0), vocab_size=tok.vocab_size).eval(),
                           tokenizer=tok)
    decode = DecodeConfig(beam=1, max_len_a=1.0, max_len_b=4)
    whole = translate_texts(ckpt, texts, "noised", decode, seed=3)
    halves = translate_texts(ckpt, texts[:2], "noised", decode, seed=3) + translate_texts(ckpt, texts[2:], "noised", decode, seed=3)
    assert whole == halves


def test_assemble_with_no_synthetic_pair_left_writes_the_real_ones(tmp_path):
    """Every back-translation rejected (an English --mono, placeholders): assemble failed with an Arrow type error,
    again on every rerun."""
    from mtcore.backtranslation.pipeline import stage_assemble
    from mtcore.backtranslation.stages import StageDir

    real = write_parquet(pa.table({"src": ["Open"], "tgt": ["Mở"], "origin": ["o"], "id": ["o:1"]}), tmp_path / "real.parquet")
    none = write_parquet(pa.table({"src": pa.array([], pa.string()), "tgt": pa.array([], pa.string()),
                                   "origin": pa.array([], pa.string()), "id": pa.array([], pa.string())}), tmp_path / "none.parquet")
    cfg = BTConfig(corpus="x", mono="y", output=str(tmp_path / "out"), upsample=2)
    report = stage_assemble(cfg, StageDir(tmp_path / "out", "07_assemble", {"k": 1}), real, none)
    assert (report["real_rows"], report["synthetic_rows"], report["rows"]) == (2, 0, 2)


def test_the_summary_keeps_its_columns_for_reused_stages():
    """"synthetic_filter (reused)" is 25 characters: it ran into the counts of an 18-character column."""
    from mtcore.backtranslation.pipeline import BTResult, stage_table

    stages = [{"stage": "clean", "input": 1500, "kept": 1466, "rejected": {"duplicate": 34}},
              {"stage": "synthetic_filter", "input": 3000, "kept": 2900, "rejected": {"repetition": 100}}]
    table = stage_table(BTResult(Path("o"), Path("o/a"), stages, ["synthetic_filter"], "r", None, None, 1.0)).splitlines()
    assert table[3].startswith("synthetic_filter (reused) ")
    assert table[2].index("1,500") == table[3].index("3,000") and table[2].index("1,466") == table[3].index("2,900"), table


def test_the_summary_row_counts_every_reject_reason():
    """Four reasons were shown and the rest cut: 8 of a row's 9 rejects."""
    from mtcore.backtranslation.pipeline import BTResult, stage_table

    rejected = {"near_duplicate": 4, "untranslated": 2, "duplicate": 1, "length_ratio": 1, "test_overlap": 1}
    stages = [{"stage": "clean", "input": 300, "kept": 291, "rejected": rejected}]
    row = stage_table(BTResult(Path("o"), Path("o/a"), stages, [], "r", None, None, 1.0)).splitlines()[2]
    assert row.endswith("near_duplicate 4, untranslated 2, duplicate 1, length_ratio 1, 1 more reason(s) 1"), row


def test_a_refused_output_names_the_settings_that_changed(tmp_path):
    """It named the stages only, the same words for an edited --mono as for another --ratio."""
    from mtcore.backtranslation.stages import StageDir, check_output

    made = StageDir(tmp_path, "04_select_mono", {"mono": {"content": "a" * 16}, "ratio": 1.0})
    made.begin()
    made.finish({"kept": 1})
    now = StageDir(tmp_path, "04_select_mono", {"mono": {"content": "b" * 16}, "ratio": 2.0})
    with pytest.raises(BTError, match=r"04_select_mono: mono.content: 'aaaa.*' → 'bbbb.*', ratio: 1.0 → 2.0\); pass --overwrite"):
        check_output([now], overwrite=False)


def test_the_output_folder_of_a_user_is_never_taken_over(tmp_path):
    """A folder with a user's files (notes, a report.json of theirs, a hidden .env) is refused, even with --overwrite:
    the job deleted augmented.* and wrote over report.json there. Its own earlier output is not."""
    from mtcore.backtranslation.stages import StageDir, check_output

    def stages(root):
        return [StageDir(root, f"{i + 1:02d}_{name}", {"k": 1}) for i, name in enumerate(STAGES)]

    for name in ("notes.txt", "report.json", ".env"):
        root = tmp_path / name.strip(".")
        root.mkdir()
        (root / name).write_text("mine")
        for overwrite in (False, True):
            with pytest.raises(BTError, match=rf"holds files the back-translation job did not make \({name}\)"):
                check_output(stages(root), overwrite=overwrite)
        assert (root / name).read_text() == "mine"
    own = tmp_path / "own"
    first = stages(own)[0]
    first.begin()
    first.finish({"kept": 1})
    for name in ("report.json", "augmented.tsv", "_mlflow_run.json"):
        (own / name).write_text("{}")
    check_output(stages(own), overwrite=False)
    check_output(stages(tmp_path / "new"), overwrite=False)
    (own / ".02_align_filter.partial").mkdir()  # what a stage killed with -9 mid-write leaves: a rerun restarts
    (own / ".02_align_filter.lock").write_text("pid 1")
    check_output(stages(own), overwrite=False)
    (own / "notes.txt").write_text("mine")
    with pytest.raises(BTError, match=r"\(notes.txt\)"):
        check_output(stages(own), overwrite=True)


def test_cleaning_rules_count_by_what_they_say_not_their_bytes(tmp_path):
    """A copy of the default rules, or the same rules respelled, is the same cleaning (clean.py reused them; the job
    refused them and made all 7 stages again). Other rules are another."""
    from mtcore.cleaning.config import DEFAULT_RULES

    copy, respelled, other = tmp_path / "copy.yaml", tmp_path / "respelled.yaml", tmp_path / "other.yaml"
    shutil.copy(DEFAULT_RULES, copy)
    text = DEFAULT_RULES.read_text(encoding="utf-8")
    respelled.write_text("# mine\n" + "\n".join(line.split("#")[0].rstrip() for line in text.splitlines()) + "\n",
                         encoding="utf-8")
    other.write_text("- NonEmpty: {}\n", encoding="utf-8")
    base = BTConfig(corpus=str(tmp_path / "c.tsv"), output=str(tmp_path / "o")).stage_settings()["clean"]
    for rules in (copy, respelled):
        assert BTConfig(corpus=str(tmp_path / "c.tsv"), output=str(tmp_path / "o"),
                        clean_config=str(rules)).stage_settings()["clean"] == base
    assert BTConfig(corpus=str(tmp_path / "c.tsv"), output=str(tmp_path / "o"),
                    clean_config=str(other)).stage_settings()["clean"] != base


def test_a_vi_en_stage_output_is_refused_as_the_corpus(tmp_path, bt_inputs):
    """A vi-en cleaning output's src column is Vietnamese: read as en-vi, the job cleaned it with the en-vi rules
    (2,672 of 2,911 pairs `wrong_language` in a review) and assembled real pairs the wrong way round."""
    stage = tmp_path / "clean-vi-en"
    write_parquet(pa.table({"src": ["Mở tệp"], "tgt": ["Open the file"]}), stage / "kept" / "part-0.parquet")
    (stage / "report.json").write_text(json.dumps({"stage": "clean", "config": {"languages": ["vi", "en"]}}))
    with pytest.raises(BTError, match=r"a vi-en stage output .* the main job reads en-vi pairs"):
        run_backtranslation(config(bt_inputs, tmp_path / "bt", corpus=str(stage)))
    assert not (tmp_path / "bt").exists()


def test_the_reverse_model_has_one_budget_and_minutes_alone_are_it(capsys):
    """`--reverse-minutes 10` trained the default 1,500 steps and said nothing: the minutes were read only beside
    `--reverse-steps 0`."""
    from mtcore.cli.backtranslate import parse_args

    args = parse_args(["--reverse-minutes", "10"])
    assert (args.reverse_steps, args.reverse_minutes) == (0, 10)
    assert (parse_args([]).reverse_steps, parse_args(["--reverse-steps", "200"]).reverse_steps) == (1500, 200)
    assert parse_args(["--reverse-steps", "0"]).reverse_minutes == BTConfig().reverse_minutes
    with pytest.raises(SystemExit):
        parse_args(["--reverse-minutes", "10", "--reverse-steps", "200"])
    assert "give one budget" in capsys.readouterr().err


@pytest.mark.parametrize("settings, message", [
    # the seed failed at stage 3 (a message naming <dict>), or in numpy's sampling with --reverse-model
    ({"seed": -1}, "--seed (-1) must be >= 0"),
    ({"seed": -1, "reverse_model": "models:/mt-vi-en/1"}, "--seed (-1) must be >= 0"),
    # passed here, then failed the reverse model's job at stage 3, after cleaning and alignment
    ({"reverse_vocab": 8}, "--reverse-vocab 8: the reverse model's `job.vocab_size` (8) must be >= 16"),
])
def test_settings_the_reverse_model_refuses_are_named_before_any_stage(tmp_path, settings, message):
    with pytest.raises(BTError, match=re.escape(message)):
        BTConfig(output=str(tmp_path / "o"), **settings)


def test_reverse_settings_of_a_given_reverse_model_are_not_checked(tmp_path):
    assert BTConfig(output=str(tmp_path / "o"), reverse_model="models:/mt-vi-en/1", reverse_vocab=8).reverse_vocab == 8


def test_the_word_train_is_not_hashed_as_a_folder_of_the_working_directory(tmp_path, monkeypatch):
    """`reverse_model: train` counted as the contents of ./train when such a folder existed where the job ran."""
    (tmp_path / "c.tsv").write_text("Open the file\tMở tập tin\n", encoding="utf-8")
    cfg = BTConfig(corpus=str(tmp_path / "c.tsv"), output=str(tmp_path / "o"))
    monkeypatch.chdir(tmp_path)
    before = cfg.stage_settings()["reverse_model"]
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "notes.txt").write_text("mine\n", encoding="utf-8")
    after = cfg.stage_settings()["reverse_model"]
    assert after["reverse_model"] == "train" and after == before
