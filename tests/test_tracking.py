"""MLflow store selection: the default SQLite store, and a dead server never crashes a job."""

from __future__ import annotations

import socket

import pytest

from mtcore import tracking


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_default_is_local_sqlite(monkeypatch, tmp_path):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setattr(tracking, "RUNS_DIR", tmp_path)
    assert tracking.tracking_uri() == f"sqlite:///{tmp_path / 'mlflow.db'}"


def test_unreachable_server_falls_back_with_one_warning(monkeypatch, tmp_path):
    monkeypatch.setattr(tracking, "RUNS_DIR", tmp_path)
    monkeypatch.setattr(tracking, "_warned", False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{free_port()}")
    with pytest.warns(RuntimeWarning, match="unreachable"):
        assert tracking.tracking_uri().startswith("sqlite:///")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second call must not warn again
        assert tracking.tracking_uri().startswith("sqlite:///")


def test_setup_creates_experiment_and_logs_a_run(mlflow_uri):
    mlflow = tracking.setup("unit-test")
    with mlflow.start_run(run_name="r") as run:
        mlflow.log_params(tracking.flatten({"model": {"heads": 4, "d_model": 64}, "seed": 1}))
        mlflow.log_metric("dev/bleu", 12.5)
    got = mlflow.get_run(run.info.run_id)
    assert got.data.params == {"model.heads": "4", "model.d_model": "64", "seed": "1"}
    assert got.data.metrics["dev/bleu"] == 12.5


def test_flatten_truncates_long_values():
    assert len(tracking.flatten({"x": "a" * 2000})["x"]) == tracking.MAX_PARAM_CHARS


def test_data_version_changes_with_content(tmp_path):
    f = tmp_path / "c.parquet"
    f.write_bytes(b"one")
    before = tracking.data_version(f)
    f.write_bytes(b"two")
    assert tracking.data_version(f) != before


def test_standard_tags_name_entry_point_commit_and_data(tmp_path):
    corpus = tmp_path / "c.tsv"
    corpus.write_text("a\tb\n")
    tags = tracking.standard_tags("pipelines/clean.py", corpus, preset="tiny")
    assert tags["mtcore.entry_point"] == "pipelines/clean.py"
    assert tags["mtcore.data_version"] == tracking.data_version(corpus) and len(tags["mtcore.data_version"]) == 12
    assert tags["mtcore.git_commit"] == tracking.git_commit() and tags["mtcore.preset"] == "tiny"


def test_experiments_open_as_model_training_in_the_ui(mlflow_uri, tmp_path):
    """MLflow 3's UI shows an untagged experiment as a GenAI traces page; ours open on the runs table."""
    import mlflow

    tracking.setup("kind-test")
    exp = mlflow.MlflowClient(mlflow_uri).get_experiment_by_name("kind-test")
    assert exp.tags[tracking.EXPERIMENT_KIND_TAG] == "custom_model_development"
    assert exp.artifact_location == (tmp_path / "mlartifacts").as_uri()


def test_clean_stage_logs_report_and_histograms(ray_local, mlflow_uri, tmp_path):
    import mlflow

    from mtcore.cleaning import clean_dataset

    tsv = tmp_path / "c.tsv"
    tsv.write_text("Open the file\tMở tập tin\nOpen the file\tMở tập tin\nSave %s\tLưu\nQuit\tThoát\n"
                   "Close the window now\tĐóng\n", encoding="utf-8")
    result = clean_dataset(tsv, tmp_path / "out", track=True)
    run = mlflow.MlflowClient(mlflow_uri).get_run(result.report["mlflow_run_id"])
    assert run.info.run_name == "clean-c" and run.info.status == "FINISHED"
    assert run.data.tags["mtcore.entry_point"] == "pipelines/clean.py"
    assert run.data.tags["mtcore.data_version"] == tracking.data_version(tsv)
    m = run.data.metrics
    assert m["clean/input"] == 5 and m["clean/kept"] == result.report["kept"]
    assert m["clean/rejected_total"] == 5 - result.report["kept"] and m["clean/rejected/duplicate"] == 1
    client = mlflow.MlflowClient(mlflow_uri)
    assert {a.path for a in client.list_artifacts(run.info.run_id)} == {"report.json", "plots"}
    plots = {a.path: a.file_size for a in client.list_artifacts(run.info.run_id, "plots")}
    assert set(plots) == {"plots/rejects_by_reason.png", "plots/score_histograms.png"}
    assert all(size > 5000 for size in plots.values())
