"""One place that decides how to reach Ray: a cluster at RAY_ADDRESS, or a local instance sized to the machine.

On a cluster nothing changes in the entry points: `ray job submit` sets RAY_ADDRESS for the
job it starts, and a driver run by hand on a node connects with `RAY_ADDRESS=auto` (or
`HOST:6379`). A cluster started by cluster.yaml / clusters/onprem.yaml has token authentication
on: Ray sends the token (~/.ray/auth_token, RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH) when
RAY_AUTH_MODE=token, which jobs inherit from the head and node shells get from ~/.bashrc.

Work must never ask for more CPUs than exist (Tune trials × Train workers × Data
tasks), or it waits forever; `available_cpus()`/`available_gpus()` are what the
entry points size themselves from.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from mtcore.console import progress_line
from mtcore.errors import MtcoreError

log = logging.getLogger(__name__)

# A bounded object store: Ray's default (30 % of RAM) is too greedy on a laptop.
DEFAULT_OBJECT_STORE_BYTES = 512 * 1024**2


def init_ray(num_cpus: int | None = None, object_store_memory: int | None = None, quiet: bool = True):
    """Connect to `RAY_ADDRESS` if set, otherwise start (or reuse) a local instance without dashboard."""
    import ray

    if ray.is_initialized():
        return ray
    address = os.environ.get("RAY_ADDRESS", "").strip()
    if address.startswith(("http://", "https://")):
        # The Jobs API address that `ray job submit` takes, not one a driver can connect to.
        raise ClusterError(
            f"RAY_ADDRESS={address} is the address of the Ray Jobs API: submit the script with "
            f"`ray job submit --address {address} -- python ...`, or set RAY_ADDRESS to the cluster "
            "(auto, or HOST:6379) to run it as a driver on a node"
        )
    if address:
        check_reachable(address)
        ray.init(address=address, log_to_driver=not quiet, runtime_env={"env_vars": _forwarded_env()})
        log.info("connected to Ray cluster at %s", address)
    else:
        ray.init(
            num_cpus=num_cpus or local_cpus(),
            include_dashboard=False,
            object_store_memory=object_store_memory or DEFAULT_OBJECT_STORE_BYTES,
            log_to_driver=not quiet,
            runtime_env={"env_vars": _forwarded_env()},
            configure_logging=True,
            logging_level=logging.WARNING,
        )
        progress_line(f"started a local Ray instance of {num_cpus or local_cpus()} CPUs")
    return ray


class ClusterError(MtcoreError, RuntimeError):
    """RAY_ADDRESS names no cluster a driver can join."""


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """A HOST:PORT that answers a TCP connection within seconds; Ray's own attempts at a dead address take
    about 14 minutes (20 rounds of "Failed to connect to GCS") before their error. `auto` is Ray's to find."""
    import socket

    host, sep, port = address.rpartition(":")
    if address == "auto" or not sep or not port.isdigit() or address.startswith("ray://"):
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as err:
        raise ClusterError(f"RAY_ADDRESS={address}: no Ray cluster answers there ({err.strerror or err}); start one "
                           f"(ray start --head, ray up cluster.yaml) or unset RAY_ADDRESS to run on this machine") from None


def local_cpus() -> int:
    """The CPUs this process may use: its affinity mask (a container's cpuset), capped by a cgroup v2 CPU quota
    (`docker --cpus=2`). os.cpu_count() is the host's, and a search sized by it asked for CPUs that are not there."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, int(int(quota) // int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cpus)


def _forwarded_env() -> dict[str, str]:
    """Settings the workers must see as the driver does (the tracking store above all)."""
    keys = ("MLFLOW_TRACKING_URI", "MTCORE_HOME", "HF_HUB_OFFLINE")
    return {k: os.environ[k] for k in keys if k in os.environ}


def available_cpus() -> int:
    import ray

    return int(ray.cluster_resources().get("CPU", 1)) if ray.is_initialized() else local_cpus()


def available_gpus() -> int:
    import ray

    if ray.is_initialized():
        return int(ray.cluster_resources().get("GPU", 0))
    try:
        import torch

        return torch.cuda.device_count()
    except ImportError:
        return 0


def map_with_actors(ds, fn, **kwargs):
    """`ds.map_batches(fn, compute=ActorPoolStrategy(...), **kwargs)` with actors that are not restarted.

    Ray Data hands a pool's actors their constructor arguments through the object store, where a restarted
    actor may not find them (ray-project/ray#53727; Ray warns on every such actor): a lost actor fails the
    stage instead, and a rerun resumes it. Ray 2.60 has no named parameter for actor restarts, only the
    `ray_remote_args` it deprecates for 2.64; that deprecation notice is ours to act on then, not the user's."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*ray_remote_args.*deprecated.*")
        return ds.map_batches(fn, max_restarts=0, **kwargs)
