"""Browse the runs: the MLflow UI/tracking server on the project's store, one command.

    python -m mtcore.ui                       # runs/mlflow.db on http://127.0.0.1:5000
    python -m mtcore.ui --port 5001           # another port
    python -m mtcore.ui --store sqlite:////data/other/mlflow.db

A thin wrapper over `mlflow server`: the backend store is the project's default
store (`mtcore.tracking.local_store_uri()`, or `--store`), new experiments keep their
artifacts in `mlartifacts/` next to the SQLite file (as `mtcore.tracking.setup`
does), and it binds 127.0.0.1 unless told otherwise. Before launching it checks
the port: a server this command already started for the same store there is
reported with its URL (nothing new is started), anything else on the port is an
error that says so. Ctrl-C stops the server.

On a cluster, the head node runs the tracking server on port 5000 (of its cluster
address, which only SSH reaches from outside); reach it through an SSH tunnel
instead of starting one here:

    ray attach cluster.yaml -p 5000           # or: ssh -N -L 5000:127.0.0.1:5000 USER@HEAD
    open http://127.0.0.1:5000                # and, for scripts: export MLFLOW_TRACKING_URI=http://127.0.0.1:5000
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from mtcore.console import add_common_options, program
from mtcore.errors import entry_point
from mtcore.errors import MtcoreError
from mtcore.runs import home
from mtcore.tracking import TrackingError, artifact_root, as_store_uri, check_sqlite_store, local_store_uri

DEFAULT_HOST = "127.0.0.1"  # loopback: the store holds unpublished work; use an SSH tunnel to share it
DEFAULT_PORT = 5000  # MLflow's own default, and what the cluster's head node uses
DEFAULT_WORKERS = 1  # one worker is plenty for one reader, and the machine is often busy training
START_TIMEOUT_S = 240.0  # a first start migrates a new SQLite schema; a busy 2-core machine takes minutes


class UIError(MtcoreError, RuntimeError):
    """The server cannot start; the message says why and what to do."""


@dataclass(frozen=True)
class ServerState:
    """What `runs/ui-<port>.json` records about a server this command started."""

    pid: int
    host: str
    port: int
    store: str

    @property
    def url(self) -> str:
        return url_for(self.host, self.port)


def url_for(host: str, port: int) -> str:
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else ("[::1]" if host in ("::", "::1") else host)
    return f"http://{shown}:{port}"


def state_file(port: int, runs_dir: Path | None = None) -> Path:
    return (runs_dir or home()) / f"ui-{port}.json"


def free_port(host: str = DEFAULT_HOST) -> int:
    """A port nothing listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_busy(host: str, port: int) -> bool:
    """True when something already listens on (host, port) or the port cannot be bound."""
    probe_host = "127.0.0.1" if host in ("0.0.0.0", "") else host
    with contextlib.suppress(OSError), socket.create_connection((probe_host, port), timeout=1.0):
        return True
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind: old TIME_WAIT connections don't count
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def mlflow_version_at(url: str, timeout: float = 3.0) -> str | None:
    """The MLflow version a server at `url` reports, or None when no MLflow server answers there."""
    try:
        with urllib.request.urlopen(url + "/health", timeout=timeout) as resp:
            if resp.status != 200:
                return None
        with urllib.request.urlopen(url + "/version", timeout=timeout) as resp:
            return resp.read().decode("utf-8", "replace").strip() or "unknown"
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_state(port: int, runs_dir: Path | None = None) -> ServerState | None:
    """The record of a server this command started on `port`, if its process still lives."""
    path = state_file(port, runs_dir)
    try:
        state = ServerState(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None
    if not _alive(state.pid):
        with contextlib.suppress(OSError):
            path.unlink()
        return None
    return state


def check_port(host: str, port: int, store: str, runs_dir: Path | None = None) -> None:
    """Raise UIError saying what already holds the port (run before launching anything)."""
    if not port_busy(host, port):
        return
    url = url_for(host, port)
    state = read_state(port, runs_dir)
    version = mlflow_version_at(url)
    if state is not None and version is not None:
        if state.store == store:
            raise UIError(
                f"the MLflow UI for {store} is already running at {url} (pid {state.pid}); open it, "
                f"or stop it with `kill {state.pid}` first"
            )
        raise UIError(
            f"port {port} is taken by an MLflow UI this command started for another store ({state.store}, "
            f"pid {state.pid}); pick another port with --port {free_port(host)}"
        )
    if version is not None:
        raise UIError(
            f"an MLflow server (version {version}) not started by mtcore.tracking.ui already answers at {url}; "
            f"if it serves this project's store, open it; otherwise pick another port, e.g. --port {free_port(host)}"
        )
    raise UIError(f"port {port} on {host} is in use by another program; pick another port, e.g. --port {free_port(host)}")


def server_command(store: str, host: str, port: int, workers: int = DEFAULT_WORKERS) -> list[str]:
    """`mlflow server` (this interpreter's MLflow) on `store`, artifacts next to a SQLite store."""
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", store,
           "--host", host, "--port", str(port), "--workers", str(workers)]
    if logging.getLogger("mlflow").getEffectiveLevel() > logging.INFO:  # uvicorn's per-request lines only with -v
        cmd += ["--uvicorn-opts", "--log-level warning"]
    root = artifact_root(store)
    if root:
        cmd += ["--default-artifact-root", root]
    return cmd


def _check_store(store: str) -> None:
    if store.startswith(("http://", "https://")):
        raise UIError(
            f"--store {store} is a tracking server, not a store: open it in the browser instead "
            "(through an SSH tunnel for a cluster: `ssh -N -L 5000:127.0.0.1:5000 USER@HEAD`)"
        )
    if store.startswith("sqlite:///"):
        db = Path(store.removeprefix("sqlite:///"))
        if not db.parent.is_dir():
            raise UIError(f"--store {store}: directory {db.parent} does not exist")
    try:
        check_sqlite_store(store, must_exist=False)  # a new store is fine: the UI creates it
    except TrackingError as err:
        raise UIError(str(err)) from None


def start_server(
    store: str | None = None,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    workers: int = DEFAULT_WORKERS,
    runs_dir: Path | None = None,
    timeout: float = START_TIMEOUT_S,
    log_path: Path | None = None,
) -> tuple[subprocess.Popen, ServerState]:
    """Check the port, launch `mlflow server` as a separate process and wait until it answers.

    Returns the process and its state (also written to `runs/ui-<port>.json`); the caller stops it."""
    store = store or local_store_uri()
    _check_store(store)
    check_port(host, port, store, runs_dir)
    log_file = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 - lives as long as the server
    quiet_env = {} if logging.getLogger("mlflow").getEffectiveLevel() <= logging.INFO else {
        "PYTHONWARNINGS": "ignore::Warning:mlflow.server.fastapi_app"}  # Starlette's deprecation, inside MLflow
    proc = subprocess.Popen(
        server_command(store, host, port, workers),
        stdout=log_file, stderr=subprocess.STDOUT if log_path else None, env={**os.environ, **quiet_env},
        start_new_session=True,  # its own process group: stopping it stops its workers too
    )
    state = ServerState(proc.pid, host, port, store)
    path = state_file(port, runs_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(state.__dict__))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            path.unlink(missing_ok=True)
            raise UIError(f"mlflow server exited with code {proc.returncode} before answering at {state.url}"
                          + (f"; see {log_path}" if log_path else ""))
        if mlflow_version_at(state.url, timeout=2.0) is not None:
            return proc, state
        time.sleep(0.5)
    stop_server(proc, port, runs_dir)
    raise UIError(f"mlflow server did not answer at {state.url} within {timeout:.0f}s")


def stop_server(proc: subprocess.Popen, port: int | None = None, runs_dir: Path | None = None, timeout: float = 15.0) -> None:
    """Stop a server started by `start_server` (its whole process group) and forget its state."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout)
    if port is not None:
        state = read_state(port, runs_dir)
        if state is None or state.pid == proc.pid:
            state_file(port, runs_dir).unlink(missing_ok=True)


def mark_experiments(store: str) -> int:
    """Tag the store's experiments that MLflow 3 would open as GenAI pages as model training; how many were tagged."""
    import mlflow

    from mtcore.tracking import mark_model_training, needs_ui_tags

    client = mlflow.MlflowClient(tracking_uri=store)
    todo = [e for e in client.search_experiments() if needs_ui_tags(e.tags)]
    for exp in todo:
        mark_model_training(client, exp.experiment_id)
    return len(todo)


def newest_experiment(store: str) -> tuple[str, str] | None:
    """(id, name) of the experiment of the most recently started run with a test BLEU (the leaderboard's sort key),
    else of the most recent run (a store with data stages only); None without runs."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=store)
    experiments = {e.experiment_id: e.name for e in client.search_experiments()}
    if not experiments:
        return None
    for where in ("metrics.`test/bleu` > -1", ""):
        runs = client.search_runs(list(experiments), filter_string=where, order_by=["attributes.start_time DESC"],
                                  max_results=1)
        if runs:
            return runs[0].info.experiment_id, experiments[runs[0].info.experiment_id]
    return None


def runs_table_url(base: str, experiment_id: str) -> str:
    """The experiment's runs table as a leaderboard (best test BLEU first; see tracking.leaderboard_view)."""
    from mtcore.tracking import leaderboard_view

    return f"{base}/#/experiments/{experiment_id}/runs?viewStateShareKey={leaderboard_view()[0]}"


@entry_point
def store_to_show(given: str | None) -> str:
    """The store the jobs record to: `--store`, else a SQLite `MLFLOW_TRACKING_URI` (the UI opened runs/mlflow.db
    beside it, without the runs), else the workspace's."""
    env_uri = os.environ.get("MLFLOW_TRACKING_URI", "").strip()
    if given:
        return as_store_uri(given)
    if env_uri and not env_uri.startswith(("http://", "https://")):
        return as_store_uri(env_uri)
    return local_store_uri()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=program("python -m mtcore.ui"), description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default=DEFAULT_HOST, help="interface to bind (default: %(default)s, this machine only)")
    ap.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (default: %(default)s)")
    ap.add_argument("--store", default=None, help="backend store: sqlite:///PATH or a .db file (default: a SQLite "
                                                  "$MLFLOW_TRACKING_URI, else the workspace's mlflow.db, runs/mlflow.db or "
                                                  "$MTCORE_HOME/mlflow.db)")
    ap.add_argument("--workers", type=int, default=DEFAULT_WORKERS, help="server worker processes (default: %(default)s)")
    add_common_options(ap)
    args = ap.parse_args(argv)
    if not 1 <= args.port <= 65535:
        print(f"error: --port: {args.port} is out of range; pass a port in 1..65535", file=sys.stderr)
        return 2
    env_uri = os.environ.get("MLFLOW_TRACKING_URI", "").strip()
    try:
        store = store_to_show(args.store)
    except TrackingError as err:
        print(f"error: {'--store' if args.store else 'MLFLOW_TRACKING_URI'} {err}", file=sys.stderr)
        return 2
    if env_uri.startswith(("http://", "https://")) and args.store is None:
        print(f"note: MLFLOW_TRACKING_URI={env_uri} is a tracking server; open it directly. "
              f"Starting the UI on the local store {store}.", file=sys.stderr)
    try:
        _check_store(store)
        check_port(args.host, args.port, store)  # before touching the store
        newest = None
        if store.startswith("sqlite:") and Path(store.removeprefix("sqlite:///")).is_file():
            mark_experiments(store)  # runs logged before mtcore tagged experiments open on their runs table too
            newest = newest_experiment(store)
        proc, state = start_server(store, args.host, args.port, workers=args.workers)
    except UIError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"MLflow UI for {store}\n  open {state.url}   (Ctrl-C stops it; pid {proc.pid})", flush=True)
    if newest is not None:
        print(f"  runs {runs_table_url(state.url, newest[0])}   (the newest run's experiment, {newest[1]})", flush=True)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"  warning: bound to {args.host}: anyone who can reach this machine can read and change the runs",
              file=sys.stderr)
    def _exit(signum, _frame):
        raise SystemExit(128 + signum)  # runs the `finally` below: the server goes with this command

    signal.signal(signal.SIGTERM, _exit)
    signal.signal(signal.SIGHUP, _exit)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        print("stopping the MLflow UI ...", file=sys.stderr)
        return 0
    finally:
        stop_server(proc, args.port)


if __name__ == "__main__":
    sys.exit(main())
