"""cluster.yaml and clusters/onprem.yaml against the cluster launcher's own schema and preparation.

`prepare_config` fills in the provider's defaults (as `ray up` does) and `validate_config`
checks the result against ray/autoscaler/ray-schema.json plus the launcher's own rules; then the
settings this project depends on are checked: the pinned image, token authentication, no port
opened beyond SSH, MLflow on the head, and scripts that exist.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
import sys
from pathlib import Path

import pytest
import ray
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = [ROOT / "cluster.yaml", ROOT / "clusters" / "onprem.yaml"]


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def all_commands(cfg: dict) -> list[str]:
    keys = ("initialization_commands", "setup_commands", "head_setup_commands", "worker_setup_commands",
            "head_start_ray_commands", "worker_start_ray_commands")
    return [cmd for key in keys for cmd in cfg.get(key) or []]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_validates_against_the_launcher_schema(path):
    prepared = prepare_config(copy.deepcopy(load(path)))
    validate_config(prepared)  # raises jsonschema.ValidationError / ValueError on any problem
    assert prepared["head_node_type"] in prepared["available_node_types"]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_a_broken_config_is_rejected_by_the_same_check(path):
    broken = load(path)
    broken["head_start_ray_commands"] = "ray start --head"  # must be a list
    broken["no_such_key"] = 1
    with pytest.raises(Exception, match="no_such_key|is not of type"):
        validate_config(prepare_config(broken))


def test_aws_cluster_shape():
    cfg = prepare_config(load(ROOT / "cluster.yaml"))
    types = cfg["available_node_types"]
    head = types[cfg["head_node_type"]]
    workers = {name: t for name, t in types.items() if name != cfg["head_node_type"]}
    assert head["resources"].get("GPU", 0) == 0 and not head["node_config"]["InstanceType"].startswith(("g", "p"))
    (gpu_type,) = workers.values()
    assert re.match(r"g[56]\.\w+$", gpu_type["node_config"]["InstanceType"])  # single-GPU g5/g6
    assert 0 <= gpu_type["min_workers"] <= gpu_type["max_workers"] <= cfg["max_workers"]
    # The official image for the pinned Ray and this Python (ray-ml images are no longer published).
    py = f"py{sys.version_info.major}{sys.version_info.minor}"
    assert cfg["docker"]["image"] == f"rayproject/ray:{ray.__version__}-{py}-gpu"
    # Nothing opened beyond the SSH rule the launcher's own security group has.
    assert not cfg["provider"].get("security_group", {}).get("IpPermissions")


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_project_setup_auth_and_tracking(path):
    cfg = load(path)
    assert cfg["file_mounts"]["~/mtcore"] == "."  # the project, from the repository root
    assert cfg["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"  # one token on every node
    assert any("pip install" in c and "torch==" in c for c in cfg["setup_commands"])
    assert any("pip install" in c and "$HOME/mtcore[cluster]" in c for c in cfg["setup_commands"])  # Ray 2.60 + dashboard
    assert ".venv" in cfg["rsync_exclude"] and "runs" in cfg["rsync_exclude"] and ".gitignore" in cfg["rsync_filter"]
    head = " ".join(cfg["head_start_ray_commands"])
    assert "scripts/cluster/start_head.sh" in head and "--autoscaling-config=~/ray_bootstrap_config.yaml" in head
    assert "scripts/cluster/start_worker.sh" in " ".join(cfg["worker_start_ray_commands"])
    for cmd in all_commands(cfg):  # every script a command names is in the repository
        for script in re.findall(r"~/mtcore/(\S+\.sh)", cmd):
            assert (ROOT / script).is_file(), script
    assert "--dashboard-host=0.0.0.0" not in " ".join(all_commands(cfg))


def test_start_scripts_keep_token_auth_and_loopback_dashboard():
    head = (ROOT / "scripts/cluster/start_head.sh").read_text()
    worker = (ROOT / "scripts/cluster/start_worker.sh").read_text()
    assert "export RAY_AUTH_MODE=token" in head and "export RAY_AUTH_MODE=token" in worker
    assert "--dashboard-host=127.0.0.1" in head
    assert "start_mlflow.sh" in head and "export MLFLOW_TRACKING_URI=" in head
    mlflow = (ROOT / "scripts/cluster/start_mlflow.sh").read_text()
    assert "--backend-store-uri" in mlflow and "MTCORE_MLFLOW_ARTIFACTS" in mlflow and "server.pid" in mlflow


def test_onprem_uses_the_local_provider():
    cfg = prepare_config(load(ROOT / "clusters" / "onprem.yaml"))
    assert cfg["provider"]["type"] == "local"
    assert cfg["provider"]["head_ip"] and cfg["provider"]["worker_ips"]
    assert cfg["auth"]["ssh_user"] and cfg["auth"]["ssh_private_key"]
    # The local provider runs every listed machine: one node type, as many workers as worker_ips.
    (node_type,) = cfg["available_node_types"].values()
    assert node_type["min_workers"] == node_type["max_workers"] == len(cfg["provider"]["worker_ips"])
    # a third machine is one more line under worker_ips (a fixed max_workers: 2 made the check fail)
    raw = load(ROOT / "clusters" / "onprem.yaml")
    raw["provider"]["worker_ips"].append("10.0.0.13")
    bigger = prepare_config(raw)
    validate_config(bigger)
    assert bigger["max_workers"] == 3


@pytest.mark.parametrize("address, message", [
    ("127.0.0.1:1", "error: RAY_ADDRESS=127.0.0.1:1: no Ray cluster answers there (Connection refused); start one "
                    "(ray start --head, ray up cluster.yaml) or unset RAY_ADDRESS to run on this machine"),
    ("http://127.0.0.1:8265", "error: RAY_ADDRESS=http://127.0.0.1:8265 is the address of the Ray Jobs API: submit "
                              "the script with `ray job submit --address http://127.0.0.1:8265 -- python ...`, or set "
                              "RAY_ADDRESS to the cluster (auto, or HOST:6379) to run it as a driver on a node"),
])
def test_a_ray_address_no_driver_can_join_is_one_line_in_seconds(tmp_path, address, message):
    """Ray's own attempts at a dead RAY_ADDRESS took about 14 minutes and 60 warning lines before their error;
    the Jobs API address was a traceback."""
    import os
    import subprocess
    import time

    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")} | {"RAY_ADDRESS": address,
                                                                              "MTCORE_HOME": str(tmp_path)}
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "experiments/train_transformer.py", "--print-config"], env=env,
                         cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and time.monotonic() - t0 < 60
    assert out.stderr.strip().splitlines() == [message]


def test_gpu_workers_check_that_torch_sees_cuda():
    """Setup imported torch only: a GPU node whose torch saw no GPU joined and trained on its CPUs."""
    aws = load(ROOT / "cluster.yaml")["worker_setup_commands"]
    assert any("torch.cuda.is_available()" in c and "sees no CUDA device" in c for c in aws)
    onprem = load(ROOT / "clusters" / "onprem.yaml")["worker_setup_commands"]
    assert any("nvidia-smi" in c and "torch.cuda.is_available()" in c for c in onprem)  # its workers may be CPU-only


def test_nodes_of_other_python_patch_versions_may_join():
    """onprem.yaml builds each machine's venv with its own python3; Ray compares Python versions at patch level."""
    import inspect

    from ray._private.utils import check_version_info

    assert "RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL" in inspect.getsource(check_version_info)  # the name Ray reads
    for script in ("start_head.sh", "start_worker.sh", "job.sh"):
        assert "export RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL=minor" in (ROOT / "scripts/cluster" / script).read_text()
    assert "minor versions must match" in (ROOT / "clusters" / "onprem.yaml").read_text().replace("\n# ", " ")


STUB_MLFLOW = """#!{python}
import http.server, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"OK")
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""
SHOWN = ("MTCORE_HOME", "MLFLOW_TRACKING_URI", "RAY_ADDRESS", "RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL")
STUB_RAY = """#!{python}
import json, os, sys
print("RAY " + json.dumps({{"argv": sys.argv[1:], "env": {{k: os.environ.get(k) for k in {shown!r}}}}}))
"""
SHOW_ENV = f"import json, os; print('JOB ' + json.dumps({{k: os.environ.get(k) for k in {SHOWN!r}}}))"


def _shown(out: str, tag: str) -> dict:
    (line,) = [line for line in out.splitlines() if line.startswith(tag + " ")]
    return json.loads(line[len(tag) + 1:])


def test_job_sh_drivers_get_the_head_start_lines_settings(tmp_path):
    """`ray exec cluster.yaml '~/mtcore/scripts/cluster/job.sh python …'` ran without the MTCORE_HOME of the head's
    start line: its driver wrote to ~/mtcore/runs on the head while Ray Data wrote on the GPU nodes. start_head.sh
    (here with stand-ins for `mlflow server` and `ray start`, which it runs last) writes the settings to
    ~/.mtcore/cluster.env and job.sh reads them; variables given to job.sh win."""
    import os
    import signal
    import socket
    import subprocess

    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name, text in (("mlflow", STUB_MLFLOW.format(python=sys.executable)),
                       ("ray", STUB_RAY.format(python=sys.executable, shown=SHOWN))):
        (stubs / name).write_text(text)
        (stubs / name).chmod(0o755)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    home = tmp_path / "home"
    home.mkdir()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MLFLOW_", "MTCORE_"))}
    base |= {"HOME": str(home), "PATH": f"{stubs}:{Path(sys.executable).parent}:{base.get('PATH', '/usr/bin:/bin')}"}
    head = base | {"RAY_AUTH_TOKEN": "t0ken", "MTCORE_MLFLOW_AUTH": "none", "MTCORE_MLFLOW_HOST": "127.0.0.1",
                   "MTCORE_MLFLOW_PORT": str(port), "MTCORE_MLFLOW_DIR": str(tmp_path / "mlflow")}

    def job(**env) -> dict:
        out = subprocess.run(["bash", str(ROOT / "scripts/cluster/job.sh"), sys.executable, "-c", SHOW_ENV],
                             env=base | env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return _shown(out.stdout, "JOB")

    try:
        assert job(MTCORE_MLFLOW_HOST="127.0.0.1")["MTCORE_HOME"] is None  # no file yet: as before, ./runs
        for given, expected in ((None, ROOT / "runs"), ("my runs", home / "my runs")):  # relative: to its cwd
            started = subprocess.run(["bash", str(ROOT / "scripts/cluster/start_head.sh"), "--block"],
                                     env=head | ({"MTCORE_HOME": given} if given else {}), cwd=home,
                                     capture_output=True, text=True, timeout=120)
            assert started.returncode == 0, started.stderr
            ray_start = _shown(started.stdout, "RAY")
            assert ray_start["argv"][:2] == ["start", "--head"]
            assert ray_start["env"]["MTCORE_HOME"] == str(expected)  # what `ray job submit` jobs inherit
            assert ray_start["env"]["RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL"] == "minor"
            driver = job()  # a plain `ray exec` shell
            assert driver == {"MTCORE_HOME": str(expected), "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{port}",
                              "RAY_ADDRESS": "auto", "RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL": "minor"}
        assert (home / ".mtcore" / "cluster.env").is_file()
        mine = job(MTCORE_HOME="/mnt/other", MLFLOW_TRACKING_URI="http://10.1.1.1:5000", RAY_ADDRESS="10.1.1.1:6379")
        assert (mine["MTCORE_HOME"], mine["MLFLOW_TRACKING_URI"], mine["RAY_ADDRESS"]) == (
            "/mnt/other", "http://10.1.1.1:5000", "10.1.1.1:6379")
        named = job(MTCORE_MLFLOW_PORT="5005", MTCORE_MLFLOW_HOST="10.0.0.9")  # the server named to job.sh
        assert named["MLFLOW_TRACKING_URI"] == "http://10.0.0.9:5005"
    finally:
        pidfile = tmp_path / "mlflow" / "server.pid"
        if pidfile.is_file():  # start_mlflow.sh runs the server under setsid: its group id is its pid
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(pidfile.read_text()), signal.SIGTERM)


@pytest.mark.parametrize("job_env, expected", [
    (None, {"MTCORE_HOME": "/h", "MLFLOW_TRACKING_URI": "http://head:5000"}),  # no Ray job: all of them
    ({"env_vars": {"MTCORE_HOME": "/x"}}, {"MLFLOW_TRACKING_URI": "http://head:5000"}),  # the job's own, not twice
    ({"env_vars": {"MTCORE_HOME": "/x", "MLFLOW_TRACKING_URI": "u"}, "working_dir": "."}, {}),
    ({"working_dir": "."}, {"MTCORE_HOME": "/h", "MLFLOW_TRACKING_URI": "http://head:5000"}),
])
def test_a_ray_jobs_own_env_vars_are_not_forwarded_again(job_env, expected):
    """`ray job submit --runtime-env-json '{"env_vars": {"MTCORE_HOME": "/x"}}'` crashed in ray.init: Ray refuses to
    merge the job's runtime env with a driver's whose env_vars share a key."""
    from mtcore.distributed.cluster import _forwarded_env

    environ = {"MTCORE_HOME": "/h", "MLFLOW_TRACKING_URI": "http://head:5000", "PATH": "/bin"}
    if job_env is not None:  # what Ray's job supervisor hands the job's driver
        environ["RAY_JOB_CONFIG_JSON_ENV_VAR"] = json.dumps({"runtime_env": job_env, "metadata": {}})
    assert _forwarded_env(environ) == expected


@pytest.mark.slow
def test_a_ray_instance_already_running_is_joined_and_one_without_cpus_refused(tmp_path):
    """With a `ray start --head` running on the machine and RAY_ADDRESS unset, ray.init(num_cpus=...) was a traceback
    ("When connecting to an existing cluster, num_cpus and num_gpus must not be provided"); a cluster without CPUs
    (cluster.yaml's head, CPU: 0, before its GPU workers joined) was sized as 1 CPU and its work waited forever.
    The instance here is this test's own (RAY_TMPDIR: its address file is nobody else's), stopped by its PID."""
    import os
    import shutil
    import signal
    import socket
    import subprocess
    import tempfile
    import time

    def free_port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    ray_tmp = tempfile.mkdtemp(prefix="mtr", dir="/tmp")  # short: Ray's socket paths live under it
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MLFLOW_", "MTCORE_"))}
    env |= {"RAY_TMPDIR": ray_tmp, "MTCORE_HOME": str(tmp_path / "home"), "RAY_AUTH_MODE": "disabled"}
    head = subprocess.Popen(
        [str(Path(sys.executable).parent / "ray"), "start", "--head", "--block", f"--port={port}", "--num-cpus=0",
         "--num-gpus=0", "--include-dashboard=false", f"--object-store-memory={80 * 1024**2}", "--disable-usage-stats",
         f"--dashboard-agent-listen-port={free_port()}", f"--metrics-export-port={free_port()}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        address_file = Path(ray_tmp) / "ray" / "ray_current_cluster"
        deadline = time.monotonic() + 120
        while not address_file.is_file():
            assert head.poll() is None and time.monotonic() < deadline, "ray start --head did not start"
            time.sleep(0.5)
        address = address_file.read_text().strip()  # this machine's address, as a user's `ray start --head` has it
        (tmp_path / "c.tsv").write_text("Open the file\tMở tập tin\n", encoding="utf-8")
        clean = [sys.executable, "pipelines/clean.py", "--input", str(tmp_path / "c.tsv"),
                 "--output", str(tmp_path / "out")]
        job_config = json.dumps({"runtime_env": {"env_vars": {"MTCORE_HOME": env["MTCORE_HOME"]}}, "metadata": {}})
        for extra in ({}, {"RAY_JOB_CONFIG_JSON_ENV_VAR": job_config}):  # as a driver, and as a `ray job submit` job
            out = subprocess.run(clean, env=env | extra, cwd=ROOT, capture_output=True, text=True, timeout=300)
            assert out.returncode == 2, out.stdout + out.stderr
            assert (f"joined the Ray instance already running on this machine at {address} (0 CPUs; started by "
                    "`ray start`); RAY_ADDRESS=local starts a separate one") in out.stdout, out.stdout + out.stderr
            assert out.stderr.strip().splitlines()[-1] == (
                f"error: the Ray cluster at {address} has no CPU yet: its worker nodes may still be starting (the "
                "head of cluster.yaml has CPU: 0); see `ray status`, and run this again once they have joined")
    finally:
        from test_multinode import stop_process_tree

        stop_process_tree(head)
        shutil.rmtree(ray_tmp, ignore_errors=True)
