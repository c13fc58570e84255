"""One place that decides how to reach Ray: a cluster at RAY_ADDRESS, or a local instance sized to the machine.

Without RAY_ADDRESS, a Ray instance that `ray start` runs on this machine (a leftover `ray start --head`, a cluster's
head in a `ray attach` shell) is joined as it is, as `ray.init()` would; `RAY_ADDRESS=local` starts a separate one.

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

import json
import logging
import os
import socket
from collections.abc import Mapping
from pathlib import Path

from mtcore.console import progress_line
from mtcore.errors import MtcoreError

log = logging.getLogger(__name__)

# A bounded object store: Ray's default (30 % of RAM) is too greedy on a laptop.
DEFAULT_OBJECT_STORE_BYTES = 512 * 1024**2


def init_ray(num_cpus: int | None = None, object_store_memory: int | None = None, quiet: bool = True):
    """Connect to `RAY_ADDRESS` if set, else join the instance `ray start` runs on this machine, else start a local
    instance without dashboard (`RAY_ADDRESS=local`: always a local one)."""
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
    env = _forwarded_env()
    runtime_env = {"env_vars": env} if env else None
    if address and address != "local":
        check_reachable(address)
        ray.init(address=address, log_to_driver=not quiet, runtime_env=runtime_env)
        log.info("connected to Ray cluster at %s", address)
    elif not address and (running := running_instance()):
        # ray.init() would join it anyway, and refuses sizing arguments there; it is sized already.
        ray.init(address=running, log_to_driver=not quiet, runtime_env=runtime_env)
        cpus = int(ray.cluster_resources().get("CPU", 0))
        progress_line(f"joined the Ray instance already running on this machine at {running} ({cpus} CPUs; started by "
                      "`ray start`); RAY_ADDRESS=local starts a separate one")
    else:
        ray.init(
            address="local",  # not a stale `ray start` address that ray.init() would try to join
            num_cpus=num_cpus or local_cpus(),
            include_dashboard=False,
            object_store_memory=object_store_memory or DEFAULT_OBJECT_STORE_BYTES,
            log_to_driver=not quiet,
            runtime_env=runtime_env,
            configure_logging=True,
            logging_level=logging.WARNING,
        )
        progress_line(f"started a local Ray instance of {num_cpus or local_cpus()} CPUs")
    return ray


def running_instance() -> str | None:
    """The address of the Ray instance `ray start` left running on this machine (what `ray.init()` without an
    address joins: Ray's ray_current_cluster file), if one answers there; a stale file names a dead one."""
    try:
        from ray._common.utils import get_ray_address_file  # private: where `ray start` writes its address

        address = Path(get_ray_address_file(None)).read_text().strip()
        host, _, port = address.rpartition(":")
        socket.create_connection((host.strip("[]"), int(port)), timeout=2).close()
    except (ImportError, OSError, ValueError):  # another Ray keeps it elsewhere: start a local instance, as before
        return None
    return address


class ClusterError(MtcoreError, RuntimeError):
    """RAY_ADDRESS names no cluster a driver can join, or the cluster has nothing to run work on yet."""


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """A HOST:PORT that answers a TCP connection within seconds; Ray's own attempts at a dead address take
    about 14 minutes (20 rounds of "Failed to connect to GCS") before their error. `auto` is Ray's to find."""
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


# The keys the workers must see as the driver does (the tracking store above all).
FORWARDED_ENV = ("MLFLOW_TRACKING_URI", "MTCORE_HOME", "HF_HUB_OFFLINE")


def _forwarded_env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """FORWARDED_ENV as the driver has them, less those a `ray job submit` job's runtime env sets already: Ray refuses
    to merge a job's env_vars with a driver's that share a key (and the job's are this process's values anyway)."""
    held = _job_env_vars(environ)
    return {k: environ[k] for k in FORWARDED_ENV if k in environ and k not in held}


def _job_env_vars(environ: Mapping[str, str]) -> set[str]:
    """The env_vars keys of the runtime env of the Ray job this driver runs as: the job supervisor hands the job's
    config to its driver in RAY_JOB_CONFIG_JSON_ENV_VAR (ray._private.runtime_env.constants), which ray.init merges."""
    try:
        runtime_env = json.loads(environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR") or "{}").get("runtime_env") or {}
        return set(runtime_env.get("env_vars") or {})
    except (ValueError, AttributeError, TypeError):
        return set()


def available_cpus() -> int:
    """The cluster's CPUs (this machine's without Ray). A cluster of none (cluster.yaml's head has CPU: 0 and the GPU
    workers join minutes after `ray up`) is an error: work sized for it would wait forever."""
    import ray

    if not ray.is_initialized():
        return local_cpus()
    cpus = int(ray.cluster_resources().get("CPU", 0))
    if cpus < 1:
        where = ray.get_runtime_context().gcs_address
        raise ClusterError(f"the Ray cluster at {where} has no CPU yet: its worker nodes may still be starting "
                           "(the head of cluster.yaml has CPU: 0); see `ray status`, and run this again once they "
                           "have joined")
    return cpus


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
