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
CHECK_EVERY_S = 2  # how often release_callback looks for the groups of stopped trials
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


def orphaned_worker_groups(job_hex: str) -> set[str]:
    """Placement groups of this job (hex ids) whose creating actor is dead: the worker groups of Train runs
    whose controller was killed with its trial. Ray keeps a group until its creator's job *and* actor are
    both dead, and the search's job lives on. Read from the GCS table directly (no dashboard needed); empty
    if that table cannot be read, and `release_callback` falls back to `unused_worker_groups`."""
    try:
        import ray
        from ray._private.state import state
        from ray.core.generated import gcs_pb2

        rows = [gcs_pb2.PlacementGroupTableData.FromString(raw) for raw in state._connect_and_get_accessor().get_placement_group_table()]
        created = gcs_pb2.PlacementGroupTableData.CREATED
        return {row.placement_group_id.hex() for row in rows
                if row.state == created and row.creator_actor_dead and row.placement_group_id.hex().endswith(job_hex)
                and not ray.ActorID(row.creator_actor_id).is_nil()  # a driver's own groups have no creator actor
                and any("CPU" in bundle.unit_resources or "GPU" in bundle.unit_resources for bundle in row.bundles)}
    except Exception as err:  # a private API: if a Ray upgrade moves or reshapes it, the slower rule still works
        log.debug("placement group table unreadable (%s): stopped trials' groups go after %s s", err, UNUSED_GROUP_S)
        return set()


def release_callback():
    """A Tune callback that gives back the CPUs of trials ASHA stopped.

    When Tune stops a trial it kills it, and the trial's Ray Train controller dies with it. Train's
    PlacementGroupCleaner should then remove the workers' placement group, but it asks the State
    API whether the controller is alive, which needs the dashboard (mtcore starts Ray without one):
    it never gets an answer, the group keeps its CPUs, and the next trial waits for them until
    RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S and fails. So this callback removes, every few seconds,
    the groups whose creating controller is dead (`orphaned_worker_groups`: seconds after Tune kills
    the trial, where waiting for an unused group cost every stopped trial a minute of the next one's
    time). As a fallback, a live run's group always has its workers placed in it (bar the seconds
    while they start), so one of this job that has had no actor for UNUSED_GROUP_S belongs to a dead
    run, and is removed."""
    import ray
    from ray.tune import Callback

    class ReleaseStoppedTrials(Callback):
        def __init__(self):
            self.job_hex = ray.get_runtime_context().get_job_id()
            self.unused_since: dict[str, float] = {}
            self.checked = 0.0

        def on_step_end(self, iteration, trials, **info):
            now = time.monotonic()
            if now - self.checked < CHECK_EVERY_S:
                return
            self.checked = now
            orphaned = orphaned_worker_groups(self.job_hex)
            for group in orphaned:
                self.release(group, "its controller is gone")
            unused = unused_worker_groups(self.job_hex) - orphaned
            self.unused_since = {g: self.unused_since.get(g, now) for g in unused}
            for group, since in list(self.unused_since.items()):
                if now - since >= UNUSED_GROUP_S:
                    self.release(group, f"no worker for {UNUSED_GROUP_S} s")
                    del self.unused_since[group]

        release = staticmethod(release_group)

    return ReleaseStoppedTrials()


def release_group(group: str, why: str) -> None:
    import ray
    from ray.util.placement_group import PlacementGroup, remove_placement_group

    try:
        remove_placement_group(PlacementGroup(ray.PlacementGroupID(bytes.fromhex(group))))
    except Exception as err:  # removed meanwhile (by Train itself): nothing to give back
        log.debug("placement group %s: %s", group[:8], err)
        return
    log.info("released the CPUs of a stopped trial (placement group %s: %s)", group[:8], why)


def release_after_search(wait_s: float = 30.0) -> None:
    """Once the search is over, the groups of the trials stopped at its very end: no Tune step came after
    them for `release_callback` to act, and the best trial's test decoding (a Ray task that needs a CPU)
    would wait for their CPUs forever. No trial runs now, so every group of this job without workers, or
    whose controller is dead, is a leftover; waits up to `wait_s` for the last workers to go."""
    import ray

    job_hex = ray.get_runtime_context().get_job_id()
    deadline = time.monotonic() + wait_s
    while True:
        leftovers = orphaned_worker_groups(job_hex) | unused_worker_groups(job_hex)
        for group in leftovers:
            release_group(group, "the search is over")
        prefix = "bundle_group_"
        held = {k[len(prefix):] for k in ray.cluster_resources()
                if k.startswith(prefix) and "_" not in k[len(prefix):] and k.endswith(job_hex)} - leftovers
        if not held or time.monotonic() >= deadline:
            return
        time.sleep(CHECK_EVERY_S)
