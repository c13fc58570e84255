"""cluster.yaml and clusters/onprem.yaml against the cluster launcher's own schema and preparation.

`prepare_config` fills in the provider's defaults (as `ray up` does) and `validate_config`
checks the result against ray/autoscaler/ray-schema.json plus the launcher's own rules; then the
settings this project depends on are checked: the pinned image, token authentication, no port
opened beyond SSH, MLflow on the head, and scripts that exist.
"""

from __future__ import annotations

import copy
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
