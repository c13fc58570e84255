"""`python -m mtcore.ui`: a real `mlflow server` process on the project's store; clear messages when the port is taken."""

from __future__ import annotations

import json
import time
import socket
import subprocess
import sys
import urllib.request

import mlflow
import pytest

from mtcore import tracking

from mtcore.tracking import ui
from mtcore.data.paths import REPO_ROOT


@pytest.fixture
def listener():
    """A plain TCP listener (not MLflow) on a free loopback port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_command_binds_loopback_and_keeps_artifacts_next_to_the_store(tmp_path):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cmd = ui.server_command(store, ui.DEFAULT_HOST, 5123)
    assert cmd[:4] == [sys.executable, "-m", "mlflow", "server"]
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and cmd[cmd.index("--port") + 1] == "5123"
    assert cmd[cmd.index("--backend-store-uri") + 1] == store
    assert cmd[cmd.index("--default-artifact-root") + 1] == (tmp_path / "mlartifacts").as_uri()
    assert tracking.artifact_root(store) == (tmp_path / "mlartifacts").as_uri()


def test_uvicorn_speaks_only_with_verbose():
    """Its per-request INFO lines drowned the command's own (-v: MLflow's and its server's INFO lines too)."""
    import logging

    mlflow_log = logging.getLogger("mlflow")
    before = mlflow_log.level
    try:
        mlflow_log.setLevel(logging.WARNING)
        cmd = ui.server_command("sqlite:///x.db", ui.DEFAULT_HOST, 5123)
        assert cmd[cmd.index("--uvicorn-opts") + 1] == "--log-level warning"
        mlflow_log.setLevel(logging.INFO)
        assert "--uvicorn-opts" not in ui.server_command("sqlite:///x.db", ui.DEFAULT_HOST, 5123)
    finally:
        mlflow_log.setLevel(before)


@pytest.mark.parametrize("host, port, url", [
    ("127.0.0.1", 5000, "http://127.0.0.1:5000"),
    ("0.0.0.0", 8080, "http://127.0.0.1:8080"),
    ("localhost", 5001, "http://localhost:5001"),
])
def test_url_for(host, port, url):
    assert ui.url_for(host, port) == url


def test_busy_port_is_refused_before_launching(listener, tmp_path):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert ui.port_busy("127.0.0.1", listener)
    with pytest.raises(ui.UIError, match=f"port {listener} on 127.0.0.1 is in use by another program; pick another port"):
        ui.start_server(store, port=listener, runs_dir=tmp_path)
    assert not (tmp_path / "mlflow.db").exists()  # nothing was started
    assert not ui.state_file(listener, tmp_path).exists()


def test_cli_busy_port_message(listener, tmp_path):
    """The real command, as a user runs it (`python -m mtcore.ui`, as the README writes it)."""
    proc = subprocess.run(
        [sys.executable, "-m", "mtcore.ui", "--port", str(listener), "--store", f"sqlite:///{tmp_path / 'mlflow.db'}"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert f"error: port {listener} on 127.0.0.1 is in use by another program" in proc.stderr


def test_store_that_is_a_server_url_is_refused(tmp_path):
    with pytest.raises(ui.UIError, match="is a tracking server, not a store.*ssh -N -L 5000:127.0.0.1:5000"):
        ui.start_server("http://127.0.0.1:5000", port=ui.free_port(), runs_dir=tmp_path)


@pytest.mark.slow
def test_real_server_answers_and_a_second_start_is_refused(tmp_path):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    port = ui.free_port()
    proc, state = ui.start_server(store, port=port, runs_dir=tmp_path, log_path=tmp_path / "server.log")
    try:
        assert proc.poll() is None and state.url == f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(state.url + "/health", timeout=10) as resp:
            assert resp.status == 200
        assert ui.mlflow_version_at(state.url) == mlflow.__version__
        assert json.loads(ui.state_file(port, tmp_path).read_text()) == {
            "pid": proc.pid, "host": "127.0.0.1", "port": port, "store": store}

        # The REST API works, on the right store, with artifacts next to the SQLite file.
        client = mlflow.MlflowClient(state.url)
        exp_id = client.create_experiment("ui-smoke")
        assert client.get_experiment(exp_id).artifact_location.startswith((tmp_path / "mlartifacts").as_uri())
        assert "ui-smoke" in {e.name for e in mlflow.MlflowClient(store).search_experiments()}

        # Starting it again: the same store is already served there; another store is refused too.
        with pytest.raises(ui.UIError, match=rf"the MLflow UI for {store} is already running at {state.url} \(pid {proc.pid}\)"):
            ui.start_server(store, port=port, runs_dir=tmp_path)
        other = f"sqlite:///{tmp_path / 'other.db'}"
        with pytest.raises(ui.UIError, match=f"port {port} is taken by an MLflow UI this command started for another store"):
            ui.start_server(other, port=port, runs_dir=tmp_path)
        # An MLflow server this command did not start (no record of it) is named as such.
        with pytest.raises(ui.UIError, match=rf"an MLflow server \(version {mlflow.__version__}\) not started by mtcore.tracking.ui"):
            ui.check_port("127.0.0.1", port, store, runs_dir=tmp_path / "elsewhere")
    finally:
        ui.stop_server(proc, port, tmp_path)
    assert proc.returncode is not None
    assert not ui.state_file(port, tmp_path).exists()
    assert not ui.port_busy("127.0.0.1", port)


def test_untagged_experiments_are_marked_as_model_training(tmp_path):
    """Experiments logged before mtcore tagged them would open as GenAI trace pages in MLflow 3's UI."""
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow.MlflowClient(store)
    exp_id = client.create_experiment("old-runs")
    assert tracking.EXPERIMENT_KIND_TAG not in client.get_experiment(exp_id).tags
    assert ui.mark_experiments(store) == 2  # "old-runs" and "Default"
    tags = client.get_experiment(exp_id).tags
    assert tags[tracking.EXPERIMENT_KIND_TAG] == tracking.EXPERIMENT_KIND
    key, view = tracking.leaderboard_view()
    assert json.loads(tags[tracking.SHARED_VIEW_TAG + key]) == json.loads(view)  # the runs table as a leaderboard
    assert json.loads(view)["orderByKey"] == "metrics.`test/bleu`" and json.loads(view)["orderByAsc"] is False
    assert ui.mark_experiments(store) == 0


def test_the_newest_runs_experiment_is_the_one_to_open(tmp_path):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow.MlflowClient(store)
    assert ui.newest_experiment(store) in (None, ("0", "Default"))  # a new store: nothing to point at
    older, newer = client.create_experiment("clean"), client.create_experiment("train_transformer")
    client.create_run(newer)
    time.sleep(0.01)
    client.create_run(older)  # started last: its experiment is the one a user just worked in
    assert ui.newest_experiment(store) == (older, "clean")
    scored = client.create_run(newer)  # a model with test BLEU: the leaderboard opens on its experiment, not clean's
    client.log_metric(scored.info.run_id, "test/bleu", 12.0)
    time.sleep(0.01)
    client.create_run(older)
    assert ui.newest_experiment(store) == (newer, "train_transformer")
    assert ui.runs_table_url("http://127.0.0.1:5000", older) == (
        f"http://127.0.0.1:5000/#/experiments/{older}/runs?viewStateShareKey={tracking.leaderboard_view()[0]}")


def test_the_ui_shows_the_sqlite_store_the_jobs_record_to(tmp_path, monkeypatch):
    """With MLFLOW_TRACKING_URI=sqlite:///other.db the jobs recorded there and the UI opened runs/mlflow.db."""
    monkeypatch.setenv("MTCORE_HOME", str(tmp_path / "runs"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'other.db'}")
    assert ui.store_to_show(None) == f"sqlite:///{tmp_path / 'other.db'}"
    assert ui.store_to_show(str(tmp_path / "given.db")) == f"sqlite:///{(tmp_path / 'given.db').resolve()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")  # a server: opened directly, the UI shows the workspace's
    assert ui.store_to_show(None) == f"sqlite:///{(tmp_path / 'runs' / 'mlflow.db').resolve()}"
