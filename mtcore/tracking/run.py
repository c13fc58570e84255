"""One MLflow run as every mtcore stage uses it: opened (or continued) by name, tagged, logged to from
any process, ended FINISHED, or FAILED when the stage raises.

`tracked_run(...)` is the context manager a stage wraps its tracked part in; `open_run(...)` is for a
run that outlives one function (a training run is opened by the driver, logged to by rank 0 of the Ray
Train workers, and ended after the test evaluation). A `TrackedRun` is just (store URI, run id), so it
pickles into Ray workers and Tune trials, and logs through MLflow's client API there: no fluent
`active_run` state leaks between stages that share a process.

Together with the rest of `mtcore.tracking`, this is the only code that imports `mlflow`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_BATCH = 100  # MLflow's log_batch takes at most 100 params and 1000 metrics per call


@dataclass
class TrackedRun:
    uri: str
    run_id: str
    _client: Any = field(default=None, repr=False, compare=False)

    def __getstate__(self) -> dict:  # the client holds a DB engine: rebuilt in the receiving process
        return {"uri": self.uri, "run_id": self.run_id, "_client": None}

    @property
    def client(self):
        if self._client is None:
            from mlflow import MlflowClient

            self._client = MlflowClient(tracking_uri=self.uri)
        return self._client

    # ------------------------------------------------------------------ writing
    def log_params(self, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)) for k, v in params.items()]
        for i in range(0, len(items), _BATCH):
            self.client.log_batch(self.run_id, params=items[i:i + _BATCH])

    def log_metrics(self, metrics: dict[str, float], step: int = 0) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, float(v), now, int(step)) for k, v in metrics.items()])

    def set_tags(self, tags: dict[str, Any]) -> None:
        from mlflow.entities import RunTag

        self.client.log_batch(self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path)

    def log_artifacts(self, directory: str | Path, artifact_path: str | None = None) -> None:
        self.client.log_artifacts(self.run_id, str(directory), artifact_path)

    def log_dict(self, obj: Any, artifact_file: str) -> None:
        self.client.log_dict(self.run_id, obj, artifact_file)

    def log_text(self, text: str, artifact_file: str) -> None:
        self.client.log_text(self.run_id, text, artifact_file)

    def log_table(self, data: dict[str, list], artifact_file: str) -> None:
        self.client.log_table(self.run_id, data, artifact_file)

    def end(self, status: str = "FINISHED") -> None:
        from mtcore import tracking

        self.client.set_terminated(self.run_id, status=status)
        tracking.closed(self.run_id)

    def reopen(self) -> None:
        from mtcore import tracking

        self.client.update_run(self.run_id, status="RUNNING")
        self.set_tags(owner_tags())
        with contextlib.suppress(Exception):  # a run continued after a kill is no longer "ended by a later run"
            self.client.delete_tag(self.run_id, "mtcore.end_reason")
        tracking.opened(self.run_id, self.uri)

    # ------------------------------------------------------------------ reading
    def _data(self):
        return self.client.get_run(self.run_id).data

    def tags(self) -> dict[str, str]:
        return dict(self._data().tags)

    def metrics(self) -> dict[str, float]:
        return dict(self._data().metrics)

    def status(self) -> str:
        return self.client.get_run(self.run_id).info.status

    def metric_history(self, name: str) -> list[tuple[int, float]]:
        return [(m.step, m.value) for m in self.client.get_metric_history(self.run_id, name)]

    def children(self, key: str) -> dict[str, "TrackedRun"]:
        """Child runs (tag `mlflow.parentRunId` = this run) by their tag `key`."""
        experiment_id = self.client.get_run(self.run_id).info.experiment_id
        found = self.client.search_runs([experiment_id], filter_string=f"tags.mlflow.parentRunId = '{self.run_id}'",
                                        max_results=1000)
        return {r.data.tags.get(key, ""): TrackedRun(self.uri, r.info.run_id) for r in found}


def _experiment_id(experiment: str) -> tuple[str, str]:
    """(store URI, experiment id), the experiment created on first use; its runs left RUNNING by a dead process
    of this machine are ended first (`end_orphaned_runs`)."""
    from mtcore import tracking

    mlflow = tracking.setup(experiment)
    uri, experiment_id = mlflow.get_tracking_uri(), mlflow.get_experiment_by_name(experiment).experiment_id
    if (uri, experiment_id) not in _swept:
        _swept.add((uri, experiment_id))
        try:
            end_orphaned_runs(mlflow.MlflowClient(tracking_uri=uri), experiment_id)
        except Exception as err:  # noqa: BLE001 - a tidy-up must never stop a run from starting
            log.debug("could not look for orphaned runs: %s", err)
    return uri, experiment_id


_swept: set[tuple[str, str]] = set()  # (store, experiment) already looked at by this process


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def _started(pid: int | str) -> str:
    """A process's start time (clock ticks since boot, /proc/PID/stat field 22): a pid reused by another process
    has another."""
    stat = _read(f"/proc/{pid}/stat")
    return stat.rsplit(")", 1)[-1].split()[19] if stat else ""


def _machine() -> dict[str, str]:
    """Where a pid means this process: the host, this boot, this pid namespace (containers that share the host's
    name have their own). Empty off Linux, where no run is judged orphaned."""
    if not Path("/proc/self/stat").is_file():
        return {}
    return {"mtcore.host": socket.gethostname(), "mtcore.boot": _read("/proc/sys/kernel/random/boot_id"),
            "mtcore.pidns": _read("/proc/self/ns/pid") or str(os.stat("/proc/self/ns/pid").st_ino)}


def owner_tags() -> dict[str, str]:
    """The process that holds a run open: a run it leaves RUNNING when it dies can be told from one in progress."""
    machine = _machine()
    return machine | {"mtcore.pid": str(os.getpid()), "mtcore.started": _started("self")} if machine else {}


def _gone(pid: int, started: str) -> bool:
    """The process is no more: no such pid, or a pid now of another process (another start time)."""
    if not Path(f"/proc/{pid}").exists():
        return True
    return bool(started) and _started(pid) not in ("", started)


def end_orphaned_runs(client, experiment_id: str) -> list[str]:
    """End KILLED the runs of `experiment_id` left RUNNING by a process of this machine that is gone (`kill -9`, the
    out-of-memory killer, a power cut: Ctrl-C and errors end their runs themselves), tagged with why; a trial's
    run is left to its search while the search's own run is open. Returns their ids."""
    machine = _machine()
    host = machine.get("mtcore.host", "")
    if not machine or "'" in host:
        return []
    running = client.search_runs([experiment_id], max_results=1000,
                                 filter_string=f"attributes.status = 'RUNNING' and tags.`mtcore.host` = '{host}'")
    ended: list[str] = []
    for children in (False, True):  # parents first: a dead search's trials are ended after it
        for run in running:
            tags = run.data.tags
            parent = tags.get("mlflow.parentRunId")
            if bool(parent) != children or not tags.get("mtcore.pid", "").isdigit():
                continue
            if any(tags.get(k) != v for k, v in machine.items()):  # another boot, another container: not ours to judge
                continue
            pid = int(tags["mtcore.pid"])
            if pid == os.getpid() or not _gone(pid, tags.get("mtcore.started", "")):
                continue
            if parent and parent not in ended and client.get_run(parent).info.status == "RUNNING":
                continue
            client.set_tag(run.info.run_id, "mtcore.end_reason",
                           f"process {pid} on {host} ended without closing this run (killed?); closed by a later run")
            client.set_terminated(run.info.run_id, status="KILLED")
            ended.append(run.info.run_id)
            log.warning("MLflow run %s (%s) was left RUNNING by process %d, which is gone: marked KILLED",
                        tags.get("mlflow.runName", "?"), run.info.run_id, pid)
    return ended


def open_run(experiment: str, name: str, *, tags: dict[str, str] | None = None, params: dict[str, Any] | None = None,
             parent: TrackedRun | str | None = None, continue_named: bool = False, fresh: bool = False) -> TrackedRun:
    """A new RUNNING run of `experiment` named `name`; with `continue_named`, the newest run of that name is
    continued instead (a resumed job keeps logging to one run), unless `fresh` (work that starts again from its
    beginning) and that run holds metrics already. Params are logged only on a new run."""
    from mtcore import tracking

    uri, experiment_id = _experiment_id(experiment)
    if continue_named:
        from mlflow import MlflowClient

        found = tracking.find_runs(MlflowClient(tracking_uri=uri), experiment_id, "mlflow.runName", name, max_results=1)
        if found and not (fresh and found[0].data.metrics):
            run = TrackedRun(uri, found[0].info.run_id)
            run.reopen()
            if parent is not None:  # continued under another parent run (a job redone with --overwrite): its child now
                run.set_tags({"mlflow.parentRunId": parent.run_id if isinstance(parent, TrackedRun) else parent})
            return run
    return _create(uri, experiment_id, name, tags, params, parent)


def _create(uri: str, experiment_id: str, name: str, tags, params, parent) -> TrackedRun:
    from mlflow import MlflowClient

    from mtcore import tracking

    tags = {**owner_tags(), **(tags or {})}
    if parent is not None:
        tags["mlflow.parentRunId"] = parent.run_id if isinstance(parent, TrackedRun) else parent
    created = MlflowClient(tracking_uri=uri).create_run(experiment_id, run_name=name, tags=tags)
    run = TrackedRun(uri, created.info.run_id)
    tracking.opened(run.run_id, uri)
    if params:
        run.log_params(params)
    return run


def open_run_with_pointer(experiment: str, name: str, pointer: Path, *, tags=None, params=None) -> TrackedRun:
    """The run whose id a file (`pointer`) keeps: a stage folder owns its run, whatever the folder's name,
    so two outputs never share a run and no filter string is built from a user's path."""
    uri, experiment_id = _experiment_id(experiment)
    if pointer.is_file():
        known = json.loads(pointer.read_text())
        if known.get("tracking_uri") == uri:
            run = TrackedRun(uri, known["run_id"])
            run.reopen()
            return run
    run = _create(uri, experiment_id, name, tags, params, None)
    pointer.parent.mkdir(parents=True, exist_ok=True)
    pointer.write_text(json.dumps({"run_id": run.run_id, "tracking_uri": uri}))
    return run


@contextlib.contextmanager
def tracked_run(experiment: str, name: str, *, tags: dict[str, str] | None = None, params: dict[str, Any] | None = None,
                parent: TrackedRun | str | None = None, continue_named: bool = False) -> Iterator[TrackedRun]:
    """Open a run, yield it, end it FINISHED, or FAILED if the body raises (the error goes on)."""
    run = open_run(experiment, name, tags=tags, params=params, parent=parent, continue_named=continue_named)
    try:
        yield run
    except BaseException:
        with contextlib.suppress(Exception):
            run.end("FAILED")
        raise
    run.end("FINISHED")


class SafeLogger:
    """Step-wise metrics from a training loop into a run: a tracking failure warns once and never stops
    the work (losing a run because a dashboard is down is worse than losing its curves)."""

    def __init__(self, run: TrackedRun | None):
        self.run, self.failed = run, False
        self.logged_through: dict[str, int] | None = None  # after `resumed`: each metric's last step in the run

    def resumed(self) -> None:
        """A resumed run replays the steps from its checkpoint to where it stopped: those points are in the run
        already, and logged again they folded its charts back on themselves. Each metric skips its own."""
        self.logged_through = {}

    def _new(self, key: str, step: int) -> bool:
        if self.logged_through is None:
            return True
        if key not in self.logged_through:
            try:
                history = self.run.client.get_metric_history(self.run.run_id, key)
                self.logged_through[key] = max((m.step for m in history), default=-1)
            except Exception:  # noqa: BLE001 - the logging below says what is wrong with the store
                self.logged_through[key] = -1
        return step > self.logged_through[key]

    def __call__(self, metrics: dict[str, float], step: int) -> None:
        if self.run is None or self.failed:
            return
        metrics = {k: v for k, v in metrics.items() if self._new(k, step)}
        if not metrics:
            return
        try:
            self.run.log_metrics({k: v for k, v in metrics.items() if k not in ("step", "epoch")}, step)
        except Exception as err:  # noqa: BLE001 - tracking must never kill a training run
            log.warning("MLflow logging failed, continuing without it: %s", err)
            self.failed = True


def download(uri: str) -> Path:
    """An artifact (`runs:/…`, `models:/NAME/VERSION`, …) of the current store, as a local path; no such run,
    model, version or path is a `FetchError` (MLflow's own exceptions stay inside the tracking layer)."""
    import mlflow
    from mlflow.exceptions import MlflowException

    from mtcore import tracking
    from mtcore.tracking.fetch import FetchError

    mlflow.set_tracking_uri(tracking.tracking_uri())
    try:
        return Path(mlflow.artifacts.download_artifacts(artifact_uri=uri))
    except MlflowException as err:
        raise FetchError(str(err).splitlines()[0] if str(err) else type(err).__name__) from None


def log_files(run: TrackedRun, files: dict[str, str], artifact_path: str | None = None) -> None:
    """Small text artifacts given as {file name: content}."""
    with tempfile.TemporaryDirectory() as tmp:
        for fname, content in files.items():
            (Path(tmp) / fname).write_text(content, encoding="utf-8")
            run.log_artifact(Path(tmp) / fname, artifact_path)
