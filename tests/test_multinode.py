"""A three-node Ray cluster on this one machine, started as a cluster starts it, with the entry points run on it.

The head and two worker nodes are separate `ray start --block` processes launched through
scripts/cluster/start_head.sh / start_worker.sh (what cluster.yaml runs), each with its own
temp dir, one CPU, free ports and token authentication on; start_head.sh also starts the MLflow
tracking server as its own process on 127.0.0.1, with MLflow's basic-auth app and credentials
derived from the cluster's Ray token (scripts/cluster/mlflow_auth.sh). The entry points are run as a user runs them on
a cluster: `python <script>` with RAY_ADDRESS pointing at the head, so `mtcore.distributed.cluster.init_ray`
connects instead of starting Ray. Which node ran what is read from the processes themselves: a
Ray worker process is a child of its node's raylet and carries the actor/task name in its title.

The pytest process stays connected to the session's own local Ray (conftest); nothing here
touches it, any other Ray instance on the machine, or `ray stop`.
"""

from __future__ import annotations

import base64
import contextlib
import importlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pytest
import ray  # noqa: F401 - puts Ray's bundled psutil on sys.path (imported below)
from cluster_auth import mlflow_credentials

from mtcore.data.corpus import write_parquet
from mtcore.nmt.training import toy_pairs

psutil = importlib.import_module("psutil")  # Ray's bundled copy, importable once ray is imported

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts" / "cluster"
pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_process_tree(proc: subprocess.Popen | None, extra_pids: set[int] = frozenset(), timeout: float = 15) -> None:
    """Stop a process we started in its own session, its process group and every descendant we saw, by PID."""
    if proc is None:
        return
    pids = set(extra_pids)
    with contextlib.suppress(psutil.Error):
        pids |= {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)  # start_new_session=True: the group id is our pid
        for pid in pids:
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).send_signal(sig)
        try:
            proc.wait(timeout=timeout if sig == signal.SIGTERM else 5)
        except subprocess.TimeoutExpired:
            continue
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return


@dataclass
class Node:
    name: str
    proc: subprocess.Popen
    log: Path
    seen_pids: set[int] = field(default_factory=set)

    def raylet(self) -> psutil.Process | None:
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                if child.name() == "raylet":
                    return child
        return None

    def ray_workers(self) -> dict[int, str]:
        """pid → process title of the Ray worker processes of this node (children of its raylet)."""
        raylet = self.raylet()
        titles: dict[int, str] = {}
        if raylet is None:
            return titles
        with contextlib.suppress(psutil.Error):
            for child in raylet.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    cmd = " ".join(child.cmdline())
                    if cmd.startswith("ray::"):
                        titles[child.pid] = cmd
        return titles


class Cluster:
    """Head + worker nodes started by scripts/cluster/start_*.sh, plus the MLflow server start_head.sh starts."""

    def __init__(self, base: Path, workers: int = 2):
        self.base = base
        self.gcs_port, self.mlflow_port = free_port(), free_port()
        self.address = f"127.0.0.1:{self.gcs_port}"
        self.mlflow_uri = f"http://127.0.0.1:{self.mlflow_port}"
        self.mlflow_dir = base / "mlflow"
        self.home = base / "home"  # MTCORE_HOME: shared by all nodes, as EFS/NFS is on a real cluster
        self.nodes: list[Node] = []
        self.n_workers = workers
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MLFLOW_", "MTCORE_"))}
        env.update(
            PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
            RAY_AUTH_MODE="token",
            RAY_AUTH_TOKEN=secrets.token_hex(16),  # this cluster's own token, not ~/.ray/auth_token
            RAY_PORT=str(self.gcs_port),
            MTCORE_HOME=str(self.home),
            MTCORE_CLUSTER_ENV=str(base / "cluster.env"),  # start_head.sh's file for job.sh: not the user's
            MTCORE_MLFLOW_HOST="127.0.0.1",
            MTCORE_MLFLOW_PORT=str(self.mlflow_port),
            MTCORE_MLFLOW_DIR=str(self.mlflow_dir),
            MTCORE_MLFLOW_WORKERS="1",
            OMP_NUM_THREADS="1",
            RAY_DEDUP_LOGS="0",
        )
        self.env = env
        self.credentials = mlflow_credentials(env)  # what job.sh and every node's shell export, from the token

    def _node_args(self, name: str) -> list[str]:
        return [
            "--block", "--node-ip-address=127.0.0.1", f"--temp-dir={self.base / name}", "--num-cpus=1", "--num-gpus=0",
            f"--object-store-memory={150 * 1024**2}", f"--dashboard-agent-listen-port={free_port()}",
            f"--metrics-export-port={free_port()}", "--disable-usage-stats",
        ]

    def _launch(self, name: str, script: str, args: list[str]) -> Node:
        log = self.base / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                ["bash", str(SCRIPTS / script), *args], env=self.env | {"RAY_HEAD_IP": "127.0.0.1"},
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.base,
            )
        node = Node(name, proc, log)
        self.nodes.append(node)
        return node

    @staticmethod
    def _wait_started(node: Node, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while "Ray runtime started" not in node.log.read_text(errors="replace"):
            if node.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"node {node.name} did not start:\n{node.log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)

    def start(self) -> None:
        self._wait_started(self._launch("head", "start_head.sh", [*self._node_args("head"), "--include-dashboard=false"]))
        workers = [self._launch(f"worker{i + 1}", "start_worker.sh", self._node_args(f"worker{i + 1}"))
                   for i in range(self.n_workers)]
        for node in workers:
            self._wait_started(node)

    def stop(self) -> None:
        for node in reversed(self.nodes):
            stop_process_tree(node.proc, node.seen_pids)
        pidfile = self.mlflow_dir / "server.pid"
        if pidfile.is_file():
            pid = int(pidfile.read_text())
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, sig)  # start_mlflow.sh runs it under setsid: group id == pid
                time.sleep(1)

    def run(self, args: list[str], timeout: float, watch: Watcher | None = None) -> subprocess.CompletedProcess:
        """An entry point as a user runs it against the cluster: RAY_ADDRESS set, no code change."""
        env = {k: v for k, v in self.env.items() if not k.startswith("MTCORE_MLFLOW_")}
        env |= {"RAY_ADDRESS": self.address, "MLFLOW_TRACKING_URI": self.mlflow_uri} | self.credentials
        proc = subprocess.Popen([sys.executable, *args], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_process_tree(proc)
            out, _ = proc.communicate()
            pytest.fail(f"{args[0]} did not finish in {timeout:.0f}s:\n{out[-4000:]}")
        finally:
            if proc.poll() is None:
                stop_process_tree(proc)
        return subprocess.CompletedProcess(args, proc.returncode, out, "")


class Watcher(threading.Thread):
    """Samples every node's Ray worker processes while a job runs: (node, pid, title) ever seen."""

    def __init__(self, cluster: Cluster, period: float = 0.1):
        super().__init__(daemon=True)
        self.cluster, self.period = cluster, period
        self.seen: set[tuple[str, int, str]] = set()
        self.first_seen: dict[tuple[str, int, str], float] = {}  # a pid changes title: ray::IDLE → ray::<actor>
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            for node in self.cluster.nodes:
                if node.proc.poll() is not None:
                    continue
                for pid, title in node.ray_workers().items():
                    node.seen_pids.add(pid)
                    self.seen.add((node.name, pid, title))
                    self.first_seen.setdefault((node.name, pid, title), time.monotonic())
            time.sleep(self.period)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)

    def nodes_running(self, needle: str) -> dict[str, set[int]]:
        found: dict[str, set[int]] = {}
        for node, pid, title in self.seen:
            if needle in title:
                found.setdefault(node, set()).add(pid)
        return found


@pytest.fixture(scope="module")
def cluster():
    base = Path(tempfile.mkdtemp(prefix="mtn", dir="/tmp"))  # short: Ray's socket paths must stay < 108 bytes
    c = Cluster(base)
    try:
        c.start()
        yield c
    finally:
        for key in c.credentials:
            os.environ.pop(key, None)
        c.stop()
        if os.environ.get("MTCORE_KEEP_TEST_CLUSTER_LOGS") is None:
            shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def toy(cluster):
    pairs = toy_pairs(360, seed=11)

    def table(rows, name):
        return pa.table({"src": [s for s, _ in rows], "tgt": [t for _, t in rows], "origin": ["toy"] * len(rows),
                         "id": [f"{name}{i}" for i in range(len(rows))]})

    data = cluster.base / "data"
    return {name: str(write_parquet(table(rows, name), data / f"{name}.parquet"))
            for name, rows in (("train", pairs[:280]), ("dev", pairs[280:320]), ("test", pairs[320:]))}


def train_args(toy, run_name: str, *overrides: str) -> list[str]:
    return [
        "experiments/train_transformer.py", "--config", "experiments/configs/tiny.yaml", "--workers", "2",
        "--run-name", run_name, f"job.train_data={toy['train']}", f"job.dev_data={toy['dev']}",
        f"job.test_data={toy['test']}", "job.vocab_size=400", "job.log_model=false", "job.test_limit=10", *overrides,
    ]


def mlflow_run(cluster: Cluster, run_id: str):
    import mlflow

    os.environ.update(cluster.credentials)  # MLflow's client reads them at each request; the fixture removes them
    client = mlflow.MlflowClient(tracking_uri=cluster.mlflow_uri)  # over HTTP, from the server process
    return client, client.get_run(run_id)


def run_id_from(out: str) -> str:
    line = next(line for line in out.splitlines() if line.startswith("run "))
    return line.split("(MLflow run ")[1].rstrip(")")


def test_cluster_is_three_nodes_with_token_auth(cluster):
    """The scripts the cluster configs run give a token-authenticated three-node cluster and a live tracking server."""
    probe = ("import os, ray; ray.init(address=os.environ['RAY_ADDRESS']); "
             "print(sorted(n['Resources'].get('CPU', 0) for n in ray.nodes() if n['Alive']))")
    env = cluster.env | {"RAY_ADDRESS": cluster.address, "RAY_AUTH_TOKEN": "not-the-token"}
    wrong = subprocess.Popen([sys.executable, "-c", probe], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, start_new_session=True)  # in parallel with the right token
    try:
        out = cluster.run(["-c", probe], timeout=120)
        refused, _ = wrong.communicate(timeout=120)
    finally:
        if wrong.poll() is None:
            stop_process_tree(wrong)
    assert out.returncode == 0, out.stdout
    assert out.stdout.strip().splitlines()[-1] == "[1.0, 1.0, 1.0]"  # head + 2 workers, one CPU each
    assert wrong.returncode != 0 and "auth" in refused.lower(), refused[-2000:]
    with socket.create_connection(("127.0.0.1", cluster.mlflow_port), timeout=5):
        pass


def http_status(url: str, auth: tuple[str, str] | None = None) -> int:
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(":".join(auth).encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code


def test_tracking_server_refuses_requests_without_the_password(cluster, tmp_path):
    """start_head.sh's MLflow server runs MLflow's basic-auth app with credentials derived from the Ray token:
    requests without them, or with a wrong password, are refused; an mtcore tool without them says so in a line."""
    api = f"{cluster.mlflow_uri}/api/2.0/mlflow/experiments/search?max_results=5"
    user, password = cluster.credentials["MLFLOW_TRACKING_USERNAME"], cluster.credentials["MLFLOW_TRACKING_PASSWORD"]
    assert http_status(api) == 401
    assert http_status(api, (user, "not-the-password")) == 401
    assert http_status(api, ("admin", password)) == 401
    assert http_status(api, (user, password)) == 200
    assert http_status(f"{cluster.mlflow_uri}/health") == 200  # the liveness probe needs no credentials
    assert password not in (cluster.mlflow_dir / "basic_auth.ini").read_text()  # the secret is in no file

    env = {k: v for k, v in cluster.env.items() if not k.startswith(("MTCORE_MLFLOW_", "RAY_AUTH"))}
    env |= {"MLFLOW_TRACKING_URI": cluster.mlflow_uri, "MTCORE_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "mtcore.report", "--output", str(tmp_path / "board")], env=env,
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.strip().count("\n") == 0 and "Traceback" not in out.stderr, out.stderr
    assert cluster.mlflow_uri in out.stderr and "refused a request without credentials (HTTP 401)" in out.stderr
    assert "MLFLOW_TRACKING_PASSWORD" in out.stderr


def test_a_new_ray_token_is_a_new_mlflow_password(tmp_path):
    """start_mlflow.sh alone, twice, with two tokens: after the restart the old password is refused."""
    port = free_port()
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MLFLOW_", "MTCORE_"))}
    base_env |= {"PATH": f"{Path(sys.executable).parent}:{base_env.get('PATH', '')}", "MTCORE_MLFLOW_HOST": "127.0.0.1",
                 "MTCORE_MLFLOW_PORT": str(port), "MTCORE_MLFLOW_DIR": str(tmp_path / "mlflow"), "MTCORE_MLFLOW_WORKERS": "1"}
    api = f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/search?max_results=1"
    passwords = []
    try:
        for token in ("first-token-0123456789", "second-token-0123456789"):
            env = base_env | {"RAY_AUTH_TOKEN": token}
            started = subprocess.run(["bash", str(SCRIPTS / "start_mlflow.sh")], env=env, capture_output=True, text=True,
                                     timeout=180)
            assert started.returncode == 0, started.stderr[-2000:]
            creds = mlflow_credentials(env)
            passwords.append(creds["MLFLOW_TRACKING_PASSWORD"])
            assert http_status(api, (creds["MLFLOW_TRACKING_USERNAME"], passwords[-1])) == 200
        assert passwords[0] != passwords[1] and http_status(api, ("mtcore", passwords[0])) == 401
    finally:
        pidfile = tmp_path / "mlflow" / "server.pid"
        if pidfile.is_file():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(pidfile.read_text()), signal.SIGTERM)


def test_clean_pipeline_runs_on_the_cluster(cluster, toy):
    tsv = cluster.base / "c.tsv"
    rows = [f"Open the {i} file\tMở tập tin {i}" for i in range(300)] + ["Open the 1 file\tMở tập tin 1", "Save %s\tLưu"]
    tsv.write_text("\n".join(rows) + "\n", encoding="utf-8")
    watch = Watcher(cluster)
    watch.start()
    try:
        out = cluster.run(["pipelines/clean.py", "--input", str(tsv), "--output", str(cluster.base / "clean")], timeout=300)
    finally:
        watch.stop()
    assert out.returncode == 0, out.stdout[-4000:]
    report = json.loads((cluster.base / "clean" / "report.json").read_text())
    assert report["input"] == 302 and report["kept"] == 300
    assert report["input"] == report["kept"] + sum(report["rejected"].values())
    # Ray Data ran its tasks in the cluster's worker processes (no local Ray was started by the driver).
    busy = {node for node, _, title in watch.seen if "IDLE" not in title}
    assert busy, f"no Ray task seen on any node: {sorted(watch.seen)}"


def test_train_ddp_over_two_nodes_survives_losing_one(cluster, toy):
    """Ray Train puts its two DDP workers on two nodes (one CPU each) and rank 0 logs to the tracking server
    over HTTP. After the first checkpoint, the raylet of a worker node that runs a DDP worker is killed: the
    node disappears, the worker group is restarted on the nodes that remain (the head and the spare worker)
    from that checkpoint (job.max_failures), and the run finishes."""
    run_dir = cluster.home / "ray_train" / "mn-fault"
    snapshot = run_dir / "checkpoint_manager_snapshot.json"  # written once Ray Train has registered a checkpoint
    watch = Watcher(cluster)
    watch.start()
    killed: dict = {}

    def kill_a_training_node():
        deadline = time.monotonic() + 500
        while time.monotonic() < deadline:
            if snapshot.is_file() and '"latest_checkpoint_result": null' not in snapshot.read_text():
                for node in cluster.nodes[1:]:
                    running = {pid for pid, title in node.ray_workers().items() if "RayTrainWorker" in title}
                    raylet = node.raylet()
                    if running and raylet is not None:
                        killed.update(node=node.name, workers=running, at=time.monotonic())
                        raylet.kill()  # the node disappears: its raylet, and with it its workers, die
                        return
            time.sleep(0.2)

    killer = threading.Thread(target=kill_a_training_node, daemon=True)
    killer.start()
    try:
        out = cluster.run(train_args(toy, "mn-fault", "train.max_steps=30", "train.validate_every=10",
                                     "job.max_failures=2"), timeout=600)
    finally:
        killer.join(timeout=5)
        watch.stop()
    assert killed, f"no checkpoint/worker node to kill was seen:\n{out.stdout[-3000:]}"
    assert out.returncode == 0, out.stdout[-4000:]
    assert "2 × CPU, 30 steps" in out.stdout

    started = {}  # (node, pid) of each Ray Train worker → when it was first seen as one
    for (node, pid, title), t in watch.first_seen.items():
        if "RayTrainWorker" in title:
            started[(node, pid)] = min(t, started.get((node, pid), t))
    before = {w for w, t in started.items() if t < killed["at"]}
    after = set(started) - before
    assert len({n for n, _ in before}) == 2, before  # the DDP ranks ran on two nodes (one CPU each)
    assert len(after) >= 2 and killed["node"] not in {n for n, _ in after}, after  # restarted on the others
    dead = next(n for n in cluster.nodes if n.name == killed["node"])
    assert dead.proc.wait(timeout=60) is not None  # that node's `ray start --block` saw its raylet die and left

    client, run = mlflow_run(cluster, run_id_from(out.stdout))
    assert run.info.run_name == "mn-fault" and run.info.status == "FINISHED"
    # train/* is logged only by rank 0 inside a Ray Train worker: it reached the server over HTTP.
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
    # The steps up to the first checkpoint (10) were trained once: a restart from scratch would log them twice.
    assert sorted(s for s in steps if s <= 10) == [5, 10] and max(steps) == 30, steps
    assert "test/bleu" in run.data.metrics
    assert (cluster.mlflow_dir / "mlflow.db").is_file()  # the server's store, on the head's disk
