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
