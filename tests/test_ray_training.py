"""Ray Train DDP on 2 CPU workers: checkpoints, MLflow from rank 0, disjoint shards, resume, recovery."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import mlflow
import pytest

from mtcore.tracking import data_version
from mtcore.distributed import ray_training
from mtcore.distributed.jobs import TrainingJob


@pytest.fixture
def runs_dir(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    monkeypatch.setenv("MTCORE_HOME", str(runs))
    return runs


def tiny_job(toy_corpus, **job):
    base = {
        "job": {"train_data": toy_corpus["train"], "dev_data": toy_corpus["dev"], "test_data": toy_corpus["test"],
                "vocab_size": 400, "workers": 2, "test_limit": 10, "test_beam": 2, **job},
        "model": {"preset": "tiny"},
        "train": {"max_tokens": 400, "warmup": 20, "validate_every": 8, "log_every": 4, "dev_limit": 10,
                  "max_steps": 16, "max_len": 32},
    }
    return TrainingJob.from_dict(base)


def test_two_worker_run_logs_everything_to_mlflow(ray_local, mlflow_uri, runs_dir, toy_corpus):
    lines: list[str] = []
    outcome = ray_training.run_training(tiny_job(toy_corpus, run_name="ddp-smoke"), progress_echo=lines.append)
    assert outcome.workers == 2 and outcome.steps == 16
    tags = mlflow.MlflowClient(mlflow_uri).get_run(outcome.mlflow_run_id).data.tags  # the hardware it resolved to
    assert (tags["mtcore.workers"], tags["mtcore.device"], tags["mtcore.tokens_per_step"]) == ("2", "cpu", "800")
    assert (outcome.best_checkpoint / "model.pt").exists() or any(outcome.best_checkpoint.iterdir())
    assert outcome.best_checkpoint.name == "best" and outcome.best_checkpoint.parent.name == outcome.run_name  # stable path
    shards = [json.loads((runs_dir / "ray_train" / "ddp-smoke" / "shards" / f"rank-{r}.json").read_text())["pairs"] for r in (0, 1)]
    assert shards[0] and shards[1] and not set(shards[0]) & set(shards[1])  # the two ranks saw disjoint pairs
    seen = set(shards[0]) | set(shards[1])
    assert seen == set(range(len(seen))) and 200 <= len(seen) <= 240  # and together every (encodable) pair
    # What the user saw while it ran: the start-up, each worker's warning (the pairs it left out), steps, the test.
    assert lines[0] == "starting 2 Ray Train CPU worker(s) for run 'ddp-smoke'"
    assert "240 training pairs (memory-mapped, encoded once) and 30 dev pairs on each of 2 worker(s); building the model" in lines
    skipped = [line for line in lines if line.startswith("warning: skipped")]
    assert skipped == ([f"warning: skipped {240 - len(seen)} of 240 training pairs: {240 - len(seen)} longer than "
                        f"max_len=32"] if len(seen) < 240 else [])
    assert any(line.startswith("step      4") for line in lines)
    assert "training stopped at step 16: reached train.max_steps=16" in lines  # why it ended, in words
    assert lines[-1] == "decoding 10 test pairs with the best checkpoint (beam 2), then logging the run's artifacts"

    client = mlflow.MlflowClient(mlflow_uri)
    run = client.get_run(outcome.mlflow_run_id)
    assert run.info.run_name == "ddp-smoke" and run.info.status == "FINISHED"
    assert run.data.params["model.heads"] == "4" and run.data.params["train.max_steps"] == "16"
    for name in ("train/loss", "train/lr", "train/tokens_per_s", "train/grad_norm", "dev/loss", "dev/bleu", "dev/chrf", "test/bleu", "test/chrf"):
        assert name in run.data.metrics, name
    assert [m.step for m in client.get_metric_history(run.info.run_id, "dev/bleu")] == [8, 16]
    assert run.data.tags["sacrebleu.bleu_signature"].startswith("nrefs:1") and run.data.tags["mtcore.stop_reason"] == "max_steps"
    assert run.data.tags["mtcore.entry_point"] == "experiments/train_transformer.py"  # experiment "train_transformer"
    assert (run.data.tags["mtcore.arch"], run.data.tags["mtcore.direction"]) == ("transformer", "en-vi")
    description = run.data.tags["mlflow.note.content"]  # the run's Description paragraph
    assert "transformer 64d × 2 layers" in description and "en→vi" in description and "at most 16 steps" in description
    assert f"BLEU {run.data.metrics['test/bleu']:.2f} (nrefs:1" in description and toy_corpus["train"] in description
    inputs = {d.tags[0].value: d.dataset for d in run.inputs.dataset_inputs}  # the Datasets panel
    assert set(inputs) == {"training", "test"}
    assert inputs["training"].digest == data_version(toy_corpus["train"]) and inputs["test"].digest == data_version(toy_corpus["test"])
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"best_checkpoint", "tokenizer", "attention", "plots", "samples", "config.json"} <= artifacts
    heatmaps = [a.path for a in client.list_artifacts(run.info.run_id, "attention")]
    assert any("cross_attention" in p for p in heatmaps) and any("encoder_self_attention" in p for p in heatmaps)

    translator = mlflow.pyfunc.load_model(f"runs:/{run.info.run_id}/translator")
    out = translator.predict(["the big cat is here", "open the new file"])
    assert len(out) == 2 and all(isinstance(t, str) for t in out)

    # The README's command, as a user types it: `mlflow models predict` on a CSV with a `src` column.
    (runs_dir / "in.csv").write_text("src\nthe big cat is here\nopen the new file\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "mlflow", "models", "predict", "-m", f"runs:/{run.info.run_id}/translator",
         "-i", str(runs_dir / "in.csv"), "-t", "csv", "-o", str(runs_dir / "out.json"), "--env-manager", "local"],
        env={**os.environ, "MLFLOW_TRACKING_URI": mlflow_uri, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    predictions = json.loads((runs_dir / "out.json").read_text())["predictions"]
    assert predictions == out  # the same translations as the in-process model


def test_rerun_resumes_and_killed_worker_recovers(ray_local, mlflow_uri, runs_dir, toy_corpus):
    job = tiny_job(toy_corpus, run_name="ddp-faults", fail_at_step=8, fail_rank=1, log_model=False)
    first = ray_training.run_training(job)
    marker = runs_dir / "ray_train" / "ddp-faults" / "injected-failure"
    assert marker.read_text() == "8"  # rank 1 did die once, and the run still finished
    assert first.steps == 16

    longer = job.with_overrides(["train.max_steps=24"])
    with pytest.raises(ray_training.JobError, match="exists with other settings"):
        ray_training.run_training(longer)  # same name, different settings: refuse to mix them
    # The same settings, once finished: its result, with nothing trained, validated or tested again.
    lines: list[str] = []
    again = ray_training.run_training(job, progress_echo=lines.append)
    assert again.steps == 16 and again.test == first.test and again.best_checkpoint == first.best_checkpoint
    assert lines == [f"run 'ddp-faults' finished already at step 16 (test BLEU {first.test['test/bleu']:.2f}): nothing "
                     f"to train; to train it again, delete {runs_dir / 'ray_train' / 'ddp-faults'} or pick another job.run_name"]
    client = mlflow.MlflowClient(mlflow_uri)
    history = client.get_metric_history(again.mlflow_run_id, "train/loss")
    assert sorted(m.step for m in history) == [4, 8, 12, 16]  # each point once, the retry's replayed steps too
    assert [m.step for m in client.get_metric_history(again.mlflow_run_id, "dev/bleu")] == [8, 16]  # not validated twice
    assert client.get_run(again.mlflow_run_id).info.status == "FINISHED"
    # Under another experiment name: still its result, and no empty MLflow run opened there.
    elsewhere = ray_training.run_training(job.with_overrides(["job.experiment=elsewhere"]), progress_echo=lines.append)
    assert elsewhere.mlflow_run_id == first.mlflow_run_id and mlflow.get_experiment_by_name("elsewhere") is None
    # Another test limit or beam: its best checkpoint is tested again (it printed the old figures as the new ones).
    retest: list[str] = []
    fewer = ray_training.run_training(job.with_overrides(["job.test_limit=4", "job.test_beam=1"]), progress_echo=retest.append)
    assert retest[0] == "run 'ddp-faults' finished already at step 16; testing its best checkpoint again (job.test_limit, job.test_beam changed)"
    assert fewer.steps == 16 and fewer.test["test/bleu_signature"] and fewer.best_checkpoint == first.best_checkpoint
    logged = client.get_run(first.mlflow_run_id).data.metrics["test/bleu"]
    assert logged == pytest.approx(fewer.test["test/bleu"]) and "test/bleu" in fewer.test
    assert client.get_run(first.mlflow_run_id).info.status == "FINISHED"
    assert json.loads(client.get_run(first.mlflow_run_id).data.tags["mtcore.tested_with"])["job.test_limit"] == 4
    same: list[str] = []
    assert ray_training.run_training(job.with_overrides(["job.test_limit=4", "job.test_beam=1"]), progress_echo=same.append).test == fewer.test
    assert len(same) == 1 and "finished already" in same[0]
    # Interrupted before its end (no outcome recorded): the same command resumes from the latest checkpoint.
    (runs_dir / "ray_train" / "ddp-faults" / ray_training.FINISHED_FILE).unlink()
    resumed: list[str] = []
    assert ray_training.run_training(job, progress_echo=resumed.append).steps == 16
    assert any(line.startswith("resuming from step 16") for line in resumed)
    # Its tokenizer is not the one the checkpoints were trained with (retrained by a newer mtcore): refused, not
    # resumed with every id meaning another piece
    (runs_dir / "ray_train" / "ddp-faults" / ray_training.FINISHED_FILE).unlink()
    for config in (runs_dir / "ray_train" / "ddp-faults").glob("checkpoint_*/config.json"):
        meta = json.loads(config.read_text())
        meta["tokenizer"]["sha256"] = "0" * 64
        config.write_text(json.dumps(meta))
    with pytest.raises(ray_training.JobError, match="is not the one this checkpoint was trained with.*delete .*ddp-faults"):
        ray_training.run_training(job)
    # Deleted, as the messages above say, and trained again: a new MLflow run (the old run was continued, and its
    # points up to step 16 hid every point of the new training)
    import shutil

    shutil.rmtree(runs_dir / "ray_train" / "ddp-faults")
    fresh = ray_training.run_training(job)
    assert fresh.mlflow_run_id != first.mlflow_run_id
    assert sorted(m.step for m in client.get_metric_history(fresh.mlflow_run_id, "train/loss")) == [4, 8, 12, 16]
    assert sorted(m.step for m in client.get_metric_history(first.mlflow_run_id, "train/loss")) == [4, 8, 12, 16]


def test_the_same_corpus_path_with_other_contents_is_another_run(mlflow_uri, runs_dir, toy_corpus):
    """A data job rerun into the same folder: the default run name changes with the data; a named run that
    exists on other data is refused, naming the data, instead of resuming on a mixture."""
    import shutil

    import pyarrow.parquet as pq

    job = tiny_job(toy_corpus)
    first = ray_training.prepare_inputs(job)
    assert ray_training.prepare_inputs(job).run_name == first.run_name  # same data: resumes
    named = tiny_job(toy_corpus, run_name="named")
    ray_training.prepare_inputs(named)
    shutil.copy(toy_corpus["train"], runs_dir / "old.parquet")
    # the same pairs at another path (another output folder of the same data job): the same run
    assert ray_training.prepare_inputs(tiny_job(toy_corpus, train_data=str(runs_dir / "old.parquet"))).run_name == first.run_name
    table = pq.read_table(toy_corpus["train"])
    pq.write_table(table.slice(0, 200), toy_corpus["train"])  # the same path, other contents
    assert ray_training.prepare_inputs(job).run_name != first.run_name
    with pytest.raises(ray_training.JobError, match="named' exists with other training data"):
        ray_training.prepare_inputs(named)
    with pytest.raises(ray_training.JobError, match=r"named' exists with other settings \(train.max_steps: 16 → 24\)"):
        ray_training.prepare_inputs(tiny_job(toy_corpus, run_name="named", train_data=str(runs_dir / "old.parquet"))
                                    .with_overrides(["train.max_steps=24"]))


def test_a_run_resumes_only_on_the_workers_it_had_and_a_changed_dev_set_is_named(runs_dir, toy_corpus, tmp_path):
    """Resumed on a machine with 1 free CPU, a 2-worker run went on with 1 (half the batch, other shards) without a
    word; `--workers 2` on a named run whose default had resolved to 2 was refused as other settings."""
    import shutil

    check = ray_training._check_same_settings
    job = tiny_job(toy_corpus, run_name="mine", workers=0)
    check(tmp_path / "mine", job, "v1", (2, False))
    check(tmp_path / "mine", job, "v1", (2, False))  # the same: resumes
    with pytest.raises(ray_training.JobError, match=r"'mine' was trained by 2 CPU worker\(s\) and would resume on 1 CPU "
                                                    r"worker\(s\): a step's batch .* \(--workers 2\)"):
        check(tmp_path / "mine", job, "v1", (1, False))
    check(tmp_path / "mine", tiny_job(toy_corpus, run_name="mine", workers=2), "v1", (2, False))  # what 0 resolved to
    with pytest.raises(ray_training.JobError, match=r"other settings \(job.workers: 0 → 1\)"):
        check(tmp_path / "mine", tiny_job(toy_corpus, run_name="mine", workers=1), "v1", (1, False))
    other_dev = tmp_path / "dev2.parquet"
    shutil.copy(toy_corpus["train"], other_dev)
    with pytest.raises(ray_training.JobError, match=r"other settings \(job.dev_data: .* → .*dev2.parquet'\)"):
        check(tmp_path / "mine", tiny_job(toy_corpus, run_name="mine", dev_data=str(other_dev), workers=0), "v1", (2, False))
    shutil.copy(toy_corpus["dev"], other_dev)  # another path to the same pairs: the same run
    check(tmp_path / "mine", tiny_job(toy_corpus, run_name="mine", dev_data=str(other_dev), workers=0), "v1", (2, False))


def test_a_run_resumes_only_in_the_precision_it_started_in(tmp_path, toy_corpus, monkeypatch):
    """`train.bf16` is a wish the hardware grants: a run interrupted on a CPU without bf16 went on in bf16 on one
    with it, under the same fingerprint."""
    import json

    from mtcore import hardware

    check = ray_training._check_same_settings
    job = tiny_job(toy_corpus, run_name="mine", workers=0).with_overrides(["train.bf16=true"])
    monkeypatch.setattr(hardware, "cpu_bf16_is_fast", lambda: False)
    check(tmp_path / "mine", job, "v1", (2, False))
    assert json.loads((tmp_path / "mine" / "mtcore-fingerprint.json").read_text())["precision"] == "fp32"
    check(tmp_path / "mine", job, "v1", (2, False))  # the same hardware: resumes
    monkeypatch.setattr(hardware, "cpu_bf16_is_fast", lambda: True)
    with pytest.raises(ray_training.JobError, match=r"'mine' trained in fp32 and would resume in bf16 on this hardware"):
        check(tmp_path / "mine", job, "v1", (2, False))
    check(tmp_path / "mine", job, "v1")  # a finished run is not resumed: nothing to check
    marker = tmp_path / "old" / "mtcore-fingerprint.json"  # written before the precision was recorded: from now on
    check(tmp_path / "old", job, "v1", (2, False))
    marker.write_text(json.dumps({k: v for k, v in json.loads(marker.read_text()).items() if k != "precision"}))
    check(tmp_path / "old", job, "v1", (2, False))
    assert json.loads(marker.read_text())["precision"] == "bf16"


def test_test_pairs_in_the_training_data_and_a_corpus_of_repeats_are_said(toy_corpus, tmp_path, caplog):
    """Training on a corpus that held 4 of the 20 test pairs reported a test BLEU without a word; so did 20 pairs
    repeated 20 times."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mtcore.data.corpus import write_parquet

    train, test = pq.read_table(toy_corpus["train"]), pq.read_table(toy_corpus["test"])
    clean = tiny_job(toy_corpus)
    with caplog.at_level("WARNING", logger="mtcore"):
        ray_training.warn_leaks_and_repeats(clean, toy_corpus["train"])
    assert not caplog.records  # the toy splits are disjoint and every pair distinct
    leaky = write_parquet(pa.concat_tables([train, test.slice(0, 4)]), tmp_path / "leaky.parquet")
    repeated = write_parquet(pa.concat_tables([train.slice(0, 20)] * 20), tmp_path / "repeated.parquet")
    with caplog.at_level("WARNING", logger="mtcore"):
        ray_training.warn_leaks_and_repeats(tiny_job(toy_corpus, train_data=str(leaky)), str(leaky))
        ray_training.warn_leaks_and_repeats(tiny_job(toy_corpus, train_data=str(repeated)), str(repeated))
    said = [r.getMessage() for r in caplog.records if r.name == "mtcore.distributed.ray_training"]
    assert len(said) == 2 and said[0].startswith("4 of the 30 test sources (13.3 %) are also training sources, e.g. ")
    assert f"`TestOverlap: {{paths: [{toy_corpus['test']}]}}`" in said[0]  # the user's own set: the rule must name it
    assert said[1].startswith("380 of the 400 training pairs (95 %) repeat another pair exactly")
    # An augmented set (the main job's output) repeats its real pairs when upsampled: not a warning.
    caplog.clear()
    doubled = pa.concat_tables([train, train]).append_column("synthetic", pa.array([False] * 2 * len(train)))
    augmented = write_parquet(doubled, tmp_path / "augmented.parquet")
    with caplog.at_level("WARNING", logger="mtcore"):
        ray_training.warn_leaks_and_repeats(tiny_job(toy_corpus, train_data=str(augmented)), str(augmented))
    assert not [r for r in caplog.records if r.name == "mtcore.distributed.ray_training"]


GERMAN = ["Die Datei wurde nicht gefunden", "Das Fenster kann nicht geöffnet werden", "Bitte warten Sie einen Moment",
          "Der Ordner ist leer", "Möchten Sie die Änderungen speichern", "Die Verbindung wurde unterbrochen",
          "Das Programm wird jetzt beendet", "Ein unbekannter Fehler ist aufgetreten", "Wählen Sie eine Datei aus",
          "Die Einstellungen wurden gespeichert", "Der Drucker ist nicht bereit", "Das Passwort ist falsch",
          "Neue Nachrichten werden abgerufen", "Die Seite konnte nicht geladen werden", "Alle Dateien anzeigen",
          "Das Dokument wurde geändert", "Bitte geben Sie Ihren Namen ein", "Die Sitzung ist abgelaufen",
          "Der Vorgang wurde abgebrochen", "Keine weiteren Ergebnisse gefunden"]


def test_a_corpus_of_another_language_pair_is_said(toy_corpus, tmp_path, caplog):
    """An en-de corpus trained as en-vi, and a German dev set, ran to the end without a word (a user's own files carry
    no record of their languages, as a cleaning stage's output does)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mtcore.data.corpus import write_parquet

    english = pq.read_table(toy_corpus["train"])["src"].to_pylist()
    german = pa.table({"src": english[: len(GERMAN) * 6], "tgt": GERMAN * 6})
    train = write_parquet(german, tmp_path / "en-de.parquet")
    dev = write_parquet(german.slice(0, 20), tmp_path / "dev-de.parquet")
    with caplog.at_level("WARNING", logger="mtcore"):
        ray_training.warn_leaks_and_repeats(tiny_job(toy_corpus, train_data=str(train), dev_data=str(dev)), str(train))
    said = [r.getMessage() for r in caplog.records if "reads as" in r.getMessage()]
    assert len(said) == 2 and all("its tgt column, vi for this job, reads as de" in line for line in said)
    assert said[0].startswith(f"job.train_data {train}") and said[1].startswith(f"job.dev_data {dev}")


def test_best_metric_loss_publishes_the_lowest_dev_loss_checkpoint(ray_local, mlflow_uri, runs_dir, toy_corpus):
    job = tiny_job(toy_corpus, run_name="by-loss").with_overrides(["train.best_metric=loss", "train.validate_every=4"])
    outcome = ray_training.run_training(job)
    history = mlflow.MlflowClient(mlflow_uri).get_metric_history(outcome.mlflow_run_id, "dev/loss")
    chosen = json.loads((outcome.best_checkpoint / "config.json").read_text())
    assert len(history) == 4 and chosen["metrics"]["dev/loss"] == min(m.value for m in history)
    assert chosen["train"]["best_metric"] == "loss"


def test_the_stop_line_names_the_setting_that_ended_training():
    from mtcore.config import TrainConfig

    train = TrainConfig(patience=3, max_steps=200)
    assert ray_training.stop_line("patience", train, 60) == ("training stopped at step 60: no gain in dev bleu for 3 "
                                                             "validations in a row (train.patience=3; 0 never stops early)")
    assert "train.time_budget_min=11" in ray_training.stop_line("time_budget", TrainConfig(time_budget_min=11), 900)


def test_best_checkpoint_follows_best_metric_skips_nan_and_prefers_the_later_on_a_tie():
    from types import SimpleNamespace

    from mtcore.config import TrainConfig

    kept = [("a", {"dev/bleu": 9.0, "dev/loss": float("nan")}), ("b", {"dev/bleu": 12.0, "dev/loss": 3.1}),
            ("c", {"dev/bleu": 12.0, "dev/loss": 2.9}), ("d", {"dev/bleu": 7.0, "dev/loss": 2.9}), ("e", {"step": 4})]
    result = SimpleNamespace(best_checkpoints=kept, checkpoint="latest", metrics={"step": 9})
    assert ray_training.best_checkpoint(result, TrainConfig(best_metric="loss"))[0] == "d"  # not the NaN, the later of 2.9s
    assert ray_training.best_checkpoint(result, TrainConfig(best_metric="bleu"))[0] == "c"
    nothing = SimpleNamespace(best_checkpoints=[("a", {"dev/loss": float("nan")})], checkpoint="latest", metrics={"step": 9})
    assert ray_training.best_checkpoint(nothing, TrainConfig(best_metric="loss")) == ("latest", {"step": 9})
    assert ray_training.best_checkpoint(SimpleNamespace(best_checkpoints=[], checkpoint=None, metrics={}), TrainConfig())[0] is None


def test_a_workers_user_error_is_found_inside_ray_trains_wrapper():
    """A bad file or setting raised on a worker reaches the user as one line (run_training turns it into a JobError);
    anything else is a bug and keeps its traceback."""
    from ray.train import WorkerGroupError

    from mtcore.data.corpus import CorpusError

    bad = CorpusError("dev.tsv:31: expected 2 tab-separated columns (src, tgt), found 3")
    assert ray_training.user_error_of(WorkerGroupError("rank 1 failed", {0: RuntimeError("lost"), 1: bad})) is bad
    assert ray_training.user_error_of(WorkerGroupError("rank 0 failed", {0: ZeroDivisionError()})) is None
    assert ray_training.user_error_of(RuntimeError("not from Ray Train")) is None


def test_a_data_error_on_the_workers_is_one_line_and_not_read_again_by_each_retry(ray_local, mlflow_uri, runs_dir, toy_corpus):
    """A corpus no pair of which fits train.max_len was a ValueError traceback, after Ray Train had retried the whole
    run (read, encode, fail) job.max_failures times."""
    job = tiny_job(toy_corpus, run_name="nothing-fits", log_model=False, workers=1, max_failures=1)
    job = job.with_overrides(["train.max_len=2"])
    lines: list[str] = []
    with pytest.raises(ray_training.JobError, match=r"failed: `train.max_len` \(2 pieces a side\) fits none of the 240 training pairs"):
        ray_training.run_training(job, progress_echo=lines.append)
    assert sum("and 30 dev pairs on each of" in line for line in lines) == 1, lines  # not again by the retry
    runs = mlflow.MlflowClient(mlflow_uri).search_runs([mlflow.get_experiment_by_name("train_transformer").experiment_id],
                                                       "attributes.run_name = 'nothing-fits'")
    assert [r.info.status for r in runs] == ["FAILED"]


def test_dev_and_test_sets_are_read_before_training(runs_dir, tmp_path):
    """A damaged test file was found after all the training (11 minutes with the default job)."""
    bad = tmp_path / "test_bad.tsv"
    bad.write_text("Open\tMở\nSave\tLưu\tthird\n", encoding="utf-8")
    job = TrainingJob.load(None, [f"job.test_data={bad}"])
    with pytest.raises(Exception, match="test_bad.tsv:2"):
        ray_training.prepare_inputs(job)


def test_ctrl_c_ends_the_run_killed_and_says_how_to_resume(mlflow_uri, runs_dir, toy_corpus, tmp_path):
    """Ray Train's own SIGINT handler aborts the run and calls sys.exit: the process ended without a word, and the
    MLflow run stayed RUNNING for good."""
    import signal
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root), "MTCORE_HOME": str(runs_dir), "MLFLOW_TRACKING_URI": mlflow_uri,
           "OMP_NUM_THREADS": "1", "RAY_ADDRESS": ""}
    cmd = [sys.executable, "-u", str(root / "experiments/train_transformer.py"), "--config", str(root / "experiments/configs/tiny.yaml"),
           "--workers", "1", "--run-name", "ctrl-c", f"job.train_data={toy_corpus['train']}", f"job.dev_data={toy_corpus['dev']}",
           f"job.test_data={toy_corpus['test']}", "job.vocab_size=400", "train.max_steps=100000", "train.log_every=2",
           "train.validate_every=0", "train.time_budget_min=5"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    for line in proc.stdout:  # wait for training steps
        if line.startswith("step") or time.time() > deadline:
            break
    time.sleep(2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted: training run 'ctrl-c' stopped; its MLflow run is marked KILLED" in err and "Traceback" not in err
    runs = mlflow.MlflowClient(mlflow_uri).search_runs(
        [e.experiment_id for e in mlflow.MlflowClient(mlflow_uri).search_experiments()], "attributes.run_name = 'ctrl-c'")
    assert [r.info.status for r in runs] == ["KILLED"]


def test_a_large_corpus_is_sampled_by_pairs_before_the_tokenizer_reads_it():
    """Every pair became two Python strings (20M at 10M pairs), all normalised before SentencePiece kept 2M."""
    import pyarrow as pa

    table = pa.table({"src": [f"s{i}" for i in range(100)], "tgt": [f"t{i}" for i in range(100)]})
    texts = ray_training.tokenizer_texts(table, max_sentences=40)
    assert len(texts) == 40 and texts == ray_training.tokenizer_texts(table, max_sentences=40)  # seeded
    assert [t[1:] for t in texts[:20]] == [t[1:] for t in texts[20:]]  # whole pairs: both sides of the same rows
    assert len(ray_training.tokenizer_texts(table)) == 200  # under the limit: every pair


def test_the_corpus_encoded_once_is_made_again_for_another_tokenizer_file(toy_corpus, runs_dir):
    """Its folder was named by the tokenizer folder's key and its code alone: a spm.model retrained in place (deleted
    to retrain it) left the workers on the old ids, while dev and test were encoded by the new one."""
    from mtcore.nmt.encoded import EncodedPairs
    from mtcore.nmt.tokenizer import Tokenizer, train_tokenizer
    from mtcore.nmt.training import toy_pairs

    job = tiny_job(toy_corpus)
    spm = ray_training.tokenizer_for(toy_corpus["train"], job)
    first = ray_training.encoded_training_pairs(toy_corpus["train"], job, spm)
    assert ray_training.encoded_training_pairs(toy_corpus["train"], job, spm) == first  # reused
    assert EncodedPairs(first)[0] == tuple(Tokenizer(spm).encode(list(ray_training.load_pairs(toy_corpus["train"], job)[0])))
    train_tokenizer([s for p in toy_pairs(360) for s in p], spm, vocab_size=450)  # retrained in place
    second = ray_training.encoded_training_pairs(toy_corpus["train"], job, spm)
    assert second != first and EncodedPairs(second)[0] == tuple(
        Tokenizer(spm).encode(list(ray_training.load_pairs(toy_corpus["train"], job)[0])))
    assert oct(second.stat().st_mode & 0o777) != "0o700"  # mkdtemp's mode would keep other users' workers out
