"""The optional Optuna searcher end to end: a tiny search proposes, prunes with ASHA and tracks like the random one."""

from __future__ import annotations

from pathlib import Path

import mlflow
import yaml


from mtcore.distributed import tune as tuning
from mtcore.distributed.tune import TuneJob

TINY = Path(__file__).resolve().parent.parent / "experiments" / "configs" / "tune_tiny.yaml"


def test_tiny_optuna_search_runs_every_trial_and_tracks_them(ray_local, mlflow_uri, tmp_path, monkeypatch, toy_corpus, capfd):
    monkeypatch.setenv("MTCORE_HOME", str(tmp_path / "runs"))
    paths = toy_corpus
    d = yaml.safe_load(TINY.read_text())
    d["search"]["space"] = {"model.heads": {"choice": [2, 4]}, "train.warmup": {"randint": [10, 60]},
                            "train.label_smoothing": {"uniform": [0.0, 0.2]}}
    d["search"]["start_from_base"] = True  # as the default search does: Optuna's first point (it crashed, nested)
    tj = TuneJob.from_dict(d, str(TINY)).with_overrides(
        [f"job.train_data={paths['train']}", f"job.dev_data={paths['dev']}", f"job.test_data={paths['test']}",
         "job.vocab_size=400", "job.test_limit=10", "train.max_tokens=400", "train.max_len=32", "train.dev_limit=10",
         "train.max_steps=16"],
        search="optuna", num_samples=3, workers_per_trial=1)
    out = tuning.run_search(tj, verbose=0)
    assert "A new study created" not in capfd.readouterr().err  # Optuna's INFO lines are not mtcore's output

    assert len(out.rows) == 3 and {r.status for r in out.rows} <= {"COMPLETED", "STOPPED"}
    for row in out.rows:  # Optuna's proposals stay inside the declared space
        assert row.values["model.heads"] in (2, 4) and 10 <= row.values["train.warmup"] <= 60
        assert 0.0 <= row.values["train.label_smoothing"] <= 0.2
    assert len({tuple(sorted(r.values.items())) for r in out.rows}) == 3
    base = {f"{section}.{key}": value for section, values in tuning.base_point(tj).items() for key, value in values.items()}
    assert any(r.values == base for r in out.rows), (base, [r.values for r in out.rows])  # the base job is a trial
    assert out.best is not None and out.test["test/bleu_signature"].startswith("nrefs:1")
    client = mlflow.MlflowClient(mlflow_uri)
    parent = client.get_run(out.parent_run_id)
    assert "optuna" in parent.data.params.values()
    children = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{out.parent_run_id}'")
    assert len(children) == 3 and all("dev/bleu" in c.data.metrics for c in children)
