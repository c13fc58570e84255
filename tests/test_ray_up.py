"""`ray up` / `ray exec` / `ray down` with clusters/onprem.yaml against this machine over SSH on loopback.

The test set-up installs openssh-server, rsync and netcat with apt-get where missing and runs its
own sshd on a free port of 127.0.0.1 (own config, host key and client key in a temp dir; the
launcher has no SSH-port setting, so `auth.ssh_proxy_command` reaches it through `nc`). Every SSH
session gets a private HOME through sshd's ForceCommand, so `~/mtcore`, `~/.ray/auth_token`,
`~/ray_bootstrap_config.yaml` and the MLflow store land in the temp dir, not in root's home.

Two things keep this from touching anything else on the machine:
- sshd runs under a small supervisor that is a child subreaper: every process started over SSH
  (the Ray head, MLflow) stays its descendant, and cleanup stops exactly those, by PID;
- `ray down` runs `ray stop` on the head, which would stop *every* Ray instance of the user on
  the machine: the sessions' PATH puts a `ray` wrapper first whose `stop` ends only the
  supervisor's descendants that belong to this cluster (its temp dir) and passes everything else
  to the real `ray`. The test config's start commands are onprem.yaml's with `ray stop` dropped
  and this machine's free ports and temp dir added.
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
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
import textwrap
import time
from pathlib import Path

import mlflow
import pytest
import ray  # noqa: F401 - puts Ray's bundled psutil on sys.path (imported below)
import yaml
from cluster_auth import mlflow_credentials

psutil = importlib.import_module("psutil")  # Ray's bundled copy, importable once ray is imported

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow

SUPERVISOR = r'''
import ctypes, os, signal, subprocess, sys, time
sys.path[:0] = [p for p in sys.argv[1].split(":") if p]
import psutil
ctypes.CDLL("libc.so.6", use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
sshd = subprocess.Popen(sys.argv[2:])
stopping = False
def stop(*_):
    global stopping
    stopping = True
signal.signal(signal.SIGTERM, stop)
while not stopping:
    with __import__("contextlib").suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    time.sleep(0.2)
# Stop every descendant (sshd, and whatever SSH sessions left running), by PID.
me = psutil.Process()
for sig in (signal.SIGTERM, signal.SIGKILL):
    for p in me.children(recursive=True):
        with __import__("contextlib").suppress(psutil.Error):
            p.send_signal(sig)
    deadline = time.time() + 10
    while time.time() < deadline and any(c.status() != psutil.STATUS_ZOMBIE for c in me.children(recursive=True)):
        with __import__("contextlib").suppress(ChildProcessError):
            os.waitpid(-1, os.WNOHANG)
        time.sleep(0.2)
'''

# `ray stop` on the head stops only this cluster's processes (see the module docstring).
RAY_WRAPPER = r'''#!/bin/bash
if [ "$1" = "stop" ]; then
  exec "{python}" - <<'EOF'
import sys
sys.path[:0] = [p for p in "{pythonpath}".split(":") if p]
import psutil
sup = psutil.Process({supervisor})
mine = [p for p in sup.children(recursive=True) if "{tempdir}" in " ".join(p.cmdline())]
for p in mine:
    p.terminate()
gone, alive = psutil.wait_procs(mine, timeout=15)
for p in alive:
    p.kill()
print(f"Stopped {{len(mine)}} processes of this test cluster.")
EOF
fi
exec "{real_ray}" "$@"
'''

FORCE_COMMAND = '''#!/bin/bash
export HOME="{home}"
cd "$HOME"
exec /bin/bash -c "${{SSH_ORIGINAL_COMMAND:-/bin/bash -l}}"
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_tools() -> None:
    missing = [pkg for tool, pkg in (("/usr/sbin/sshd", "openssh-server"), ("rsync", "rsync"), ("nc", "netcat-openbsd"))
               if shutil.which(tool) is None]
    if missing:
        env = os.environ | {"DEBIAN_FRONTEND": "noninteractive"}
        sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
        subprocess.run([*sudo, "apt-get", "update", "-qq"], check=True, env=env, capture_output=True)
        subprocess.run([*sudo, "apt-get", "install", "-y", "-qq", *missing], check=True, env=env, capture_output=True)


class LoopbackSSH:
    """sshd on 127.0.0.1:<free port> for the current user, key auth only, HOME redirected; cleanup by PID."""

    def __init__(self, base: Path):
        self.base, self.port, self.user = base, free_port(), getpass.getuser()
        self.home = base / "home"
        self.key = base / "id_ed25519"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.home.mkdir(parents=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.base / "host_key")], check=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key)], check=True)
        (self.base / "authorized_keys").write_text((self.base / "id_ed25519.pub").read_text())
        force = self.base / "session.sh"
        force.write_text(FORCE_COMMAND.format(home=self.home))
        force.chmod(0o755)
        config = self.base / "sshd_config"
        config.write_text(textwrap.dedent(f"""\
            Port {self.port}
            ListenAddress 127.0.0.1
            HostKey {self.base / 'host_key'}
            PidFile {self.base / 'sshd.pid'}
            AuthorizedKeysFile {self.base / 'authorized_keys'}
            AllowUsers {self.user}
            PermitRootLogin prohibit-password
            PasswordAuthentication no
            KbdInteractiveAuthentication no
            UsePAM no
            StrictModes no
            ForceCommand {force}
            PermitUserEnvironment no
            MaxSessions 50
            MaxStartups 50
            """))
        Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation directory
        pythonpath = str(Path(psutil.__file__).parent.parent)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SUPERVISOR, pythonpath, "/usr/sbin/sshd", "-D", "-f", str(config),
             "-E", str(self.base / "sshd.log")],
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("sshd did not start:\n" + (self.base / "sshd.log").read_text(errors="replace"))
            time.sleep(0.2)

    def descendants(self) -> list[psutil.Process]:
        with contextlib.suppress(psutil.Error):
            return psutil.Process(self.proc.pid).children(recursive=True)
        return []

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)  # the supervisor stops its descendants by PID, then exits
        try:
            self.proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            for p in self.descendants():
                with contextlib.suppress(psutil.Error):
                    p.kill()
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def loopback_cluster():
    ensure_tools()
    base = Path(tempfile.mkdtemp(prefix="mtu", dir="/tmp"))  # short: Ray's socket paths must stay < 108 bytes
    ssh = LoopbackSSH(base)
    try:
        ssh.start()
        yield base, ssh, write_config(base, ssh)
    finally:
        ssh.stop()
        forget_cluster(f"mtcore-test-{base.name}")
        if os.environ.get("MTCORE_KEEP_TEST_CLUSTER_LOGS") is None:
            shutil.rmtree(base, ignore_errors=True)


def forget_cluster(name: str) -> None:
    """What the launcher leaves in /tmp for this (uniquely named) cluster: state, config cache, SSH control dir."""
    for leftover in Path("/tmp").glob(f"cluster-{name}.*"):  # the local provider's node state
        leftover.unlink(missing_ok=True)
    for cached in Path("/tmp").glob("ray-config-*"):
        with contextlib.suppress(OSError):
            if f'"cluster_name": "{name}"' in cached.read_text():
                cached.unlink()
    control = Path(f"/tmp/ray_ssh_{hashlib.sha256(getpass.getuser().encode()).hexdigest()[:10]}")
    shutil.rmtree(control / hashlib.sha256(name.encode()).hexdigest()[:10], ignore_errors=True)
    with contextlib.suppress(OSError):
        control.rmdir()  # only if empty


def write_config(base: Path, ssh: LoopbackSSH) -> dict:
    """clusters/onprem.yaml pointed at 127.0.0.1, with this machine's ports, temp dir, venv and token."""
    cfg = yaml.safe_load((ROOT / "clusters" / "onprem.yaml").read_text())
    gcs, mlflow_port, dashboard, tempdir = free_port(), free_port(), free_port(), base / "ray"
    venv_bin = Path(sys.executable).parent
    token = base / "auth_token"
    token.write_text(secrets.token_hex(16))
    shim = base / "bin"
    shim.mkdir()
    (shim / "ray").write_text(RAY_WRAPPER.format(
        python=sys.executable, pythonpath=str(Path(psutil.__file__).parent.parent), supervisor=ssh.proc.pid,
        tempdir=str(tempdir), real_ray=venv_bin / "ray"))
    (shim / "ray").chmod(0o755)
    # The sessions' shell: the wrapper, then this machine's venv (standing in for ~/mtcore-venv).
    (ssh.home / ".bashrc").write_text(
        f'export PATH="{shim}:{venv_bin}:$PATH"\nexport PYTHONPATH="$HOME/mtcore"\nexport OMP_NUM_THREADS=1\n')
    (ssh.home / ".profile").write_text("")

    cfg["cluster_name"] = f"mtcore-test-{base.name}"
    cfg["provider"] = {"type": "local", "head_ip": "127.0.0.1", "worker_ips": []}
    cfg["max_workers"] = 0
    cfg["auth"] = {"ssh_user": ssh.user, "ssh_private_key": str(ssh.key),
                   "ssh_proxy_command": f"nc 127.0.0.1 {ssh.port}"}
    cfg["file_mounts"] = {"~/mtcore": str(ROOT), "~/.ray/auth_token": str(token)}
    # No venv to build here (nothing may be downloaded): onprem.yaml's other set-up, then an import check.
    cfg["setup_commands"] = [c for c in cfg["setup_commands"] if "mtcore-venv" not in c] + [
        'python -c "import mtcore, ray; print(mtcore.__file__, ray.__version__)"']
    ports = (f"--temp-dir={tempdir} --num-cpus=1 --num-gpus=0 --object-store-memory={150 * 1024**2}"
             f" --dashboard-agent-listen-port={free_port()} --metrics-export-port={free_port()}"
             f" --dashboard-port={dashboard} --disable-usage-stats")  # the dashboard serves `ray job submit`
    env = (f"RAY_PORT={gcs} MTCORE_MLFLOW_HOST=127.0.0.1 MTCORE_MLFLOW_PORT={mlflow_port}"
           " MTCORE_MLFLOW_WORKERS=1 MTCORE_HOME=$HOME/runs")
    cfg["head_start_ray_commands"] = [f"{env} {cmd} {ports}" for cmd in cfg["head_start_ray_commands"]
                                      if cmd.strip() != "ray stop"]
    cfg["worker_start_ray_commands"] = [c for c in cfg["worker_start_ray_commands"] if c.strip() != "ray stop"]
    assert not any("ray stop" in c for c in cfg["head_start_ray_commands"] + cfg["worker_start_ray_commands"])
    path = base / "cluster.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return {"path": path, "gcs": gcs, "mlflow_port": mlflow_port, "dashboard": dashboard, "tempdir": tempdir,
            "home": ssh.home, "token": token}


def ray_cli(*args: str, timeout: float = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_ADDRESS", "RAY_AUTH"))} | (env or {})
    return subprocess.run([str(Path(sys.executable).parent / "ray"), *args], check=False, env=env, capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def test_ray_up_exec_down_on_loopback(loopback_cluster):
    base, ssh, info = loopback_cluster
    cfg = str(info["path"])

    up = ray_cli("up", "-y", "--no-config-cache", cfg)
    log = up.stdout + up.stderr
    assert up.returncode == 0, log[-6000:]
    assert (info["home"] / "mtcore" / "pyproject.toml").is_file()  # file_mounts synced the project over rsync/SSH
    assert (info["home"] / ".ray" / "auth_token").read_text() == (base / "auth_token").read_text()
    assert (info["home"] / "mlflow" / "server.pid").is_file()  # start_head.sh started MLflow on the head
    assert "export RAY_AUTH_MODE=token" in (info["home"] / ".bashrc").read_text()  # onprem.yaml's set-up ran
    head = [p.name() for p in ssh.descendants() if str(info["tempdir"]) in " ".join(p.cmdline())]
    assert "raylet" in head and "gcs_server" in head, head  # the Ray head runs, started over SSH

    # A job on the cluster as the README runs one: scripts/cluster/job.sh finds the head (here on its test
    # port) and the head's MLflow server, which the cleaning pipeline then logs to over HTTP.
    tsv = "printf 'Open the file\\tMở tập tin\\nOpen the file\\tMở tập tin\\nSave %%s\\tLưu\\n' > ~/c.tsv"
    job = (f"{tsv} && RAY_ADDRESS=127.0.0.1:{info['gcs']} MTCORE_MLFLOW_HOST=127.0.0.1 MTCORE_MLFLOW_PORT={info['mlflow_port']} "
           "~/mtcore/scripts/cluster/job.sh python pipelines/clean.py --input ~/c.tsv --output ~/clean-out")
    ran = ray_cli("exec", "--no-config-cache", cfg, job)
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-6000:]
    report = json.loads((info["home"] / "clean-out" / "report.json").read_text())
    assert report["input"] == 3 and report["kept"] == 1
    creds = mlflow_credentials({"PATH": os.environ["PATH"], "RAY_AUTH_TOKEN": (info["home"] / ".ray" / "auth_token").read_text()})
    with pytest.MonkeyPatch.context() as env:  # MLflow's client reads the credentials at each request
        for key, value in creds.items():
            env.setenv(key, value)
        server = mlflow.MlflowClient(f"http://127.0.0.1:{info['mlflow_port']}")
        logged = server.search_runs([server.get_experiment_by_name("clean").experiment_id])
    assert [r.data.metrics["clean/kept"] for r in logged] == [1.0]  # the job's run, on the head's server

    # The README's other way: `ray job submit --working-dir .` from the user's checkout, through the dashboard
    # (on the head's loopback; on a real cluster through `ray dashboard cluster.yaml`). Ray runs the job in a
    # temporary copy of the working dir; its outputs must land in the head's MTCORE_HOME, not in that copy.
    submit = ray_cli("job", "submit", "--address", f"http://127.0.0.1:{info['dashboard']}", "--working-dir", ".",
                     "--", "python", "pipelines/clean.py", "--input", str(info["home"] / "c.tsv"),
                     env={"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(info["token"])})
    log = submit.stdout + submit.stderr
    assert submit.returncode == 0 and "succeeded" in log, log[-6000:]
    out = info["home"] / "runs" / "clean"  # the default --output: $MTCORE_HOME/clean on the head
    assert f"report → {out / 'report.json'}" in log, log[-3000:]  # the job's own summary, streamed back
    report = json.loads((out / "report.json").read_text())
    assert report["input"] == 3 and report["kept"] == 1
    assert not list(info["tempdir"].rglob("report.json"))  # nothing in Ray's copy of the working dir
    with pytest.MonkeyPatch.context() as env:
        for key, value in creds.items():
            env.setenv(key, value)
        logged = server.search_runs([server.get_experiment_by_name("clean").experiment_id])
    assert sorted(r.data.metrics["clean/kept"] for r in logged) == [1.0, 1.0]  # this job's run too, on the head's server

    # (That a driver with the wrong token is refused is shown by test_multinode, with the same start_head.sh.)
    down = ray_cli("down", "-y", cfg)
    assert down.returncode == 0, (down.stdout + down.stderr)[-4000:]
    assert "Stopped" in down.stdout + down.stderr  # `ray stop` on the head went through the wrapper
    time.sleep(2)
    left = [p for p in ssh.descendants() if str(info["tempdir"]) in " ".join(p.cmdline())]
    assert not left, [p.cmdline() for p in left]
