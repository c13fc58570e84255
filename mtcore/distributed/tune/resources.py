"""How many trials run at once and with how many Train workers, and giving back the CPUs of the
trials ASHA stopped.

A trial's driver function only waits on its Train run, so it asks for no CPU; each Train worker takes
one CPU (and one GPU on a GPU cluster). Trials run concurrently only while `concurrent trials ×
workers per trial ≤ CPUs` (and ≤ GPUs): asking for more is an error that names the numbers, because
Train runs that cannot get all their workers wait forever.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from mtcore.distributed.tune.space import SearchConfig, TuneError

log = logging.getLogger(__name__)


WORKER_GROUP_START_TIMEOUT_S = 900
UNUSED_GROUP_S = 60  # a worker group of the search this long without workers belongs to a stopped trial
STOPPED_TRIAL_KILL_S = 10  # see run_search: how long a stopped trial may take to end before Tune kills it
TRIAL_DRIVER_RESOURCES = {"CPU": 0, "memory": 256 * 1024**2}  # a trial's driver function waits on its Train run


@dataclass(frozen=True)
class ResourcePlan:
    workers_per_trial: int
    concurrent_trials: int
    use_gpu: bool
    cpus: int
    gpus: int

    def describe(self) -> str:
        kind = "GPU" if self.use_gpu else "CPU"
        return (f"{self.concurrent_trials} concurrent trial(s) × {self.workers_per_trial} {kind} worker(s) "
                f"on a cluster of {self.cpus} CPUs / {self.gpus} GPUs")


def plan_resources(search: SearchConfig, cpus: int, gpus: int) -> ResourcePlan:
    """Workers per trial and concurrent trials such that no Train run ever waits for a CPU or GPU.

    Each Train worker takes 1 CPU (and 1 GPU when training on GPUs); a trial's driver function takes none."""
    use_gpu = gpus > 0 if search.gpus_per_worker == -1 else bool(search.gpus_per_worker)
    if use_gpu and gpus == 0:
        raise TuneError("--gpus-per-worker 1 asks for GPU workers, but the Ray cluster has no GPUs")
    workers = search.workers_per_trial or (1 if use_gpu else min(2, cpus))
    if workers > cpus or (use_gpu and workers > gpus):
        have = f"{gpus} GPUs" if use_gpu and workers > gpus else f"{cpus} CPUs"
        raise TuneError(f"{workers} workers per trial need {workers} {'GPUs' if use_gpu and workers > gpus else 'CPUs'}, "
                        f"but the Ray cluster has {have}")
    fit = cpus // workers if not use_gpu else min(cpus, gpus) // workers
    concurrent = search.concurrent_trials or max(1, min(fit, search.trials))
    need_cpu = concurrent * workers
    if need_cpu > cpus:
        raise TuneError(f"{concurrent} concurrent trials × {workers} workers × 1 CPU = {need_cpu} CPUs, "
                        f"but the Ray cluster has {cpus}; lower --workers-per-trial or the concurrent trials")
    if use_gpu and need_cpu > gpus:
        raise TuneError(f"{concurrent} concurrent trials × {workers} workers × 1 GPU = {need_cpu} GPUs, "
                        f"but the Ray cluster has {gpus}")
    return ResourcePlan(workers, concurrent, use_gpu, cpus, gpus)


def unused_worker_groups(job_hex: str) -> set[str]:
    """Placement groups of this job (hex ids) that reserve CPUs and have no actor placed in them."""
    import ray

    total, free, prefix = ray.cluster_resources(), ray.available_resources(), "bundle_group_"
    return {key[len(prefix):] for key, amount in total.items()
            if key.startswith(prefix) and "_" not in key[len(prefix):]  # the whole group, not one bundle
            and key.endswith(job_hex) and f"CPU_group_{key[len(prefix):]}" in total and free.get(key, 0) >= amount}


def release_callback():
    """A Tune callback that gives back the CPUs of trials ASHA stopped.

    When Tune stops a trial it kills it, and the trial's Ray Train controller dies with it. Train's
    PlacementGroupCleaner should then remove the workers' placement group, but it asks the State
    API whether the controller is alive, which needs the dashboard (mtcore starts Ray without one):
    it never gets an answer, the group keeps its CPUs, and the next trial waits for them until
    RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S and fails. A live run's group always has its workers
    placed in it (bar the seconds while they start); one of this job that has had no actor for
    UNUSED_GROUP_S belongs to a dead run, and is removed."""
    import ray
    from ray.tune import Callback
    from ray.util.placement_group import PlacementGroup, remove_placement_group

    class ReleaseStoppedTrials(Callback):
        def __init__(self):
            self.job_hex = ray.get_runtime_context().get_job_id()
            self.unused_since: dict[str, float] = {}
            self.checked = 0.0

        def on_step_end(self, iteration, trials, **info):
            now = time.monotonic()
            if now - self.checked < 5:
                return
            self.checked = now
            unused = unused_worker_groups(self.job_hex)
            self.unused_since = {g: self.unused_since.get(g, now) for g in unused}
            for group, since in list(self.unused_since.items()):
                if now - since >= UNUSED_GROUP_S:
                    remove_placement_group(PlacementGroup(ray.PlacementGroupID(bytes.fromhex(group))))
                    del self.unused_since[group]
                    log.info("released the CPUs of a stopped trial (placement group %s)", group[:8])

    return ReleaseStoppedTrials()
