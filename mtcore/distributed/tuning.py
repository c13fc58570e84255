"""Ray Tune search over model hyperparameters (and the architecture); every trial is a Ray Train DDP run.

Three pieces, kept apart (as in Ray's Train V2 + Tune examples):
- the search space (`Param`, `SearchConfig`): a `search:` section next to the
  job/model/train base of a job file; each key is a `model.*` or `train.*` field and
  each sampled value becomes an override of the base `TrainingJob`. Every value of
  every choice and both ends of every range are checked against `ModelConfig` /
  `TrainConfig` (alone and in combination) before any trial starts. `model.arch` may be
  searched (`{choice: [transformer, rnn]}`), so that one MLflow comparison shows both
  architectures; every other key is checked against each architecture in the space;
- the trial (`_trial`): a Tune *driver function* that builds the trial's job and calls
  `mtcore.distributed.ray_training.run_training` (in a task outside the trial's CPU-less placement
  group), whose Train workers report dev BLEU at each validation; `ValidationReportCallback`
  forwards those reports to the trial, so ASHA compares trials at the same training step;
- the driver (`run_search`): plans resources, opens the parent MLflow run, runs (or
  restores) the `Tuner`, closes the books (early-stopped children, the best trial's
  test BLEU, the model registry) and returns a table of trials.

Resources. A trial's driver function only waits on its Train run, so it asks for no
CPU; each Train worker takes one CPU (and one GPU on a GPU cluster). Trials run
concurrently only while `concurrent trials × workers per trial ≤ CPUs` (and ≤ GPUs):
asking for more is an error that names the numbers, because Train runs that cannot
get all their workers wait forever. On a 2-CPU machine the default is **one trial at
a time × 2 DDP workers**, rather than 2 trials × 1 worker:
- each trial is then the run it stands for (DDP, as on a cluster), and per-trial time
  budgets (`train.time_budget_min`) mean the same for every trial instead of depending
  on what shares the cores;
- ASHA is asynchronous: sequential trials let each new trial be compared at every rung
  against the complete history of the previous ones, so it prunes with the most
  information (2 concurrent trials would often pass rungs before anything is recorded);
- one model in memory at a time on a machine shared with others.
`--workers-per-trial 1` gives 2 trials × 1 worker (more throughput for tiny models,
where gloo all-reduce dominates). A trial that ASHA stops is killed within seconds
(`STOPPED_TRIAL_KILL_S`), so that its workers' CPUs go to the next trial. On GPUs the default is one GPU worker per trial and
as many concurrent trials as GPUs (and CPUs) allow.

MLflow: the search is a parent run (experiment `tune_transformer`, named after what
is searched) and each trial a child run in the same experiment (params, curves,
dev/test BLEU); trials stopped by ASHA end KILLED with the tag
`mtcore.tune.stopped_early=true`, crashed trials end FAILED. The best trial's
checkpoint is logged as a pyfunc `translator` model in its child run and registered
(`mtcore-en-vi-transformer` by default).

Resume: search and trial names are derived from the settings (never timestamps), so
`run_search(..., resume=True)` finds the Tune experiment, its parent run and each
trial's Train run and MLflow run again: finished trials are not rerun, interrupted
ones continue from their last checkpoint.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import itertools
import json
import logging
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mtcore.errors import MtcoreError
from mtcore.distributed import ray_training
from mtcore.config import ConfigError, ModelConfig, TrainConfig
from mtcore.distributed.jobs import TrainingJob, apply_early_overrides
from mtcore.runs import home

log = logging.getLogger(__name__)

# The search `tune_transformer.py` / `mtcore tune` runs without --config; package data, so a wheel has it.
DEFAULT_SEARCH = Path(__file__).with_name("default_search.yaml")
METRIC = "dev/bleu"  # what ASHA and the searchers maximise; reported at each validation
TIME_ATTR = "step"  # ASHA's clock: the training step of the validation
RUNG_METRICS = {"dev/bleu": "max", "dev/loss": "min"}  # what ASHA may compare at its rungs
KINDS = ("choice", "grid", "uniform", "loguniform", "randint")
SCHEDULERS = ("asha", "fifo")
SEARCHERS = ("random", "optuna")
MAX_COMBINATIONS = 20_000  # beyond this, combinations are checked pairwise instead of all together
SEARCHABLE = {"model": ModelConfig, "train": TrainConfig}
WORKER_GROUP_START_TIMEOUT_S = 900
UNUSED_GROUP_S = 60  # a worker group of the search this long without workers belongs to a stopped trial
STOPPED_TRIAL_KILL_S = 10  # see run_search: how long a stopped trial may take to end before Tune kills it
TRIAL_DRIVER_RESOURCES = {"CPU": 0, "memory": 256 * 1024**2}  # a trial's driver function waits on its Train run


class TuneError(MtcoreError, RuntimeError):
    """A search that cannot start or finish; the message says why."""


# --------------------------------------------------------------------------- search space


@dataclass(frozen=True)
class Param:
    """One searched key. `choice`/`grid`: the values; `uniform`/`loguniform`/`randint`: (low, high), both inclusive."""

    key: str  # "model.heads", "train.warmup", ...
    kind: str
    values: tuple

    @classmethod
    def from_yaml(cls, key: str, spec: Any) -> Param:
        where = f"search space `{key}`"
        if isinstance(spec, list):  # shorthand: a plain list is a choice
            spec = {"choice": spec}
        if not isinstance(spec, dict) or len(spec) != 1:
            raise ConfigError(f"{where}: expected one of {list(KINDS)} with its values, e.g. {{choice: [2, 4, 8]}}, got {spec!r}")
        (kind, values), = spec.items()
        if kind not in KINDS:
            raise ConfigError(f"{where}: unknown kind {kind!r}; choose from {list(KINDS)}")
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{where}: {kind} needs a non-empty list, got {values!r}")
        if kind in ("uniform", "loguniform", "randint"):
            if len(values) != 2 or not all(_is_number(v) for v in values):
                raise ConfigError(f"{where}: {kind} needs [low, high] numbers, got {values!r}")
            low, high = values
            if kind == "randint" and not all(isinstance(v, int) for v in values):
                raise ConfigError(f"{where}: randint needs integer bounds, got {values!r}")
            if not low < high:
                raise ConfigError(f"{where}: {kind} needs low < high, got {values!r}")
            if kind == "loguniform" and low <= 0:
                raise ConfigError(f"{where}: loguniform needs low > 0, got {values!r}")
        elif len(set(map(repr, values))) != len(values):
            raise ConfigError(f"{where}: {kind} lists a value twice: {values!r}")
        return cls(key, kind, tuple(values))

    def candidates(self) -> tuple:
        """The values a config check must accept: every listed value, or both ends of a range."""
        return self.values

    def domain(self):
        from ray import tune

        low_high = self.values
        return {
            "choice": lambda: tune.choice(list(self.values)),
            "grid": lambda: tune.grid_search(list(self.values)),
            "uniform": lambda: tune.uniform(*low_high),
            "loguniform": lambda: tune.loguniform(*low_high),
            "randint": lambda: tune.randint(low_high[0], low_high[1] + 1),  # Tune's upper bound is exclusive
        }[self.kind]()

    def describe(self) -> str:
        return f"{self.kind} {list(self.values)}"

    @property
    def short(self) -> str:
        return self.key.split(".", 1)[1]


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@dataclass(frozen=True)
class AshaConfig:
    """Asynchronous successive halving (Li et al. 2020) on dev BLEU, with the training step as its clock."""

    metric: str = METRIC  # what the rungs compare: dev/bleu (higher is better) or dev/loss (lower is better)
    grace_period: int = 0  # steps before the first cut; 0 = the first validation (train.validate_every)
    reduction_factor: int = 2  # keep the top 1/rf at each rung; 2 suits searches of a handful of trials
    max_t: int = 0  # 0 = train.max_steps, or unbounded when runs stop on a time budget

    def __post_init__(self):
        if self.metric not in RUNG_METRICS:
            raise ConfigError(f"`search.asha.metric` {self.metric!r}: choose from {list(RUNG_METRICS)}")
        if self.grace_period < 0 or self.max_t < 0:
            raise ConfigError("`search.asha.grace_period` and `search.asha.max_t` must be >= 0")
        if self.reduction_factor < 2:
            raise ConfigError(f"`search.asha.reduction_factor` ({self.reduction_factor}) must be >= 2")


@dataclass(frozen=True)
class SearchConfig:
    space: tuple[Param, ...] = ()
    num_samples: int = 4  # sampled configurations (with `grid` keys: repeats of the grid)
    scheduler: str = "asha"
    search: str = "random"
    seed: int = 0  # the same seed samples the same configurations, whatever the scheduler
    workers_per_trial: int = 0  # 0 = 2 CPU workers (1 GPU worker on a GPU cluster), never more than exist
    gpus_per_worker: int = -1  # -1 = 1 when the cluster has GPUs, else 0
    concurrent_trials: int = 0  # 0 = as many as the CPUs (GPUs) allow for that many workers
    time_budget_min: float = 0.0  # the whole search (0 = none); per-trial budgets are train.time_budget_min
    experiment: str = "tune_transformer"  # MLflow experiment of the parent and of every trial
    name: str = ""  # "" = derived from the settings (stable, so that --resume finds the search)
    register_as: str = ""  # "" = mtcore-SRC-TGT-ARCH; "-" = do not register
    # The first trial runs the base job's own values of the searched keys (Tune's points_to_evaluate),
    # so the search is never judged against a default it did not try; it counts as one of num_samples.
    start_from_base: bool = False
    asha: AshaConfig = field(default_factory=AshaConfig)

    def __post_init__(self):
        if self.scheduler not in SCHEDULERS:
            raise ConfigError(f"`search.scheduler` {self.scheduler!r}: choose from {list(SCHEDULERS)}")
        if self.search not in SEARCHERS:
            raise ConfigError(f"`search.search` {self.search!r}: choose from {list(SEARCHERS)}")
        if self.num_samples < 1:
            raise ConfigError(f"`search.num_samples` ({self.num_samples}) must be >= 1")
        for name in ("workers_per_trial", "concurrent_trials"):
            if getattr(self, name) < 0:
                raise ConfigError(f"`search.{name}` ({getattr(self, name)}) must be >= 0 (0 = automatic)")
        if self.gpus_per_worker not in (-1, 0, 1):
            raise ConfigError(
                f"`search.gpus_per_worker` ({self.gpus_per_worker}) must be 0 or 1: each Train worker "
                "holds a whole GPU (fractional sharing is not supported by mtcore.distributed.ray_training)"
            )
        if self.time_budget_min < 0:
            raise ConfigError(f"`search.time_budget_min` ({self.time_budget_min}) must be >= 0")
        if self.search == "optuna" and any(p.kind == "grid" for p in self.space):
            raise ConfigError("`grid` keys need the random search; use `choice` with optuna")
        if self.start_from_base and any(p.kind == "grid" for p in self.space):
            raise ConfigError("`search.start_from_base` and `grid` keys do not mix: a grid already names every trial")
        if not self.space:
            raise ConfigError("`search.space` is empty: name at least one model.* or train.* key to search")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SearchConfig:
        if not isinstance(d, dict):
            raise ConfigError(f"`search` must be a mapping, got {type(d).__name__}")
        d = dict(d)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"unknown `search` key(s) {unknown}; known keys: {sorted(known)}")
        space = d.pop("space", None) or {}
        if not isinstance(space, dict):
            raise ConfigError("`search.space` must map keys like model.heads to {choice: [...]} etc.")
        asha = d.pop("asha", None) or {}
        if not isinstance(asha, dict) or set(asha) - {f.name for f in dataclasses.fields(AshaConfig)}:
            raise ConfigError(f"`search.asha` keys: {[f.name for f in dataclasses.fields(AshaConfig)]}, got {asha!r}")
        for key, typ in (("num_samples", int), ("seed", int), ("workers_per_trial", int), ("gpus_per_worker", int),
                         ("concurrent_trials", int), ("scheduler", str), ("search", str), ("experiment", str),
                         ("name", str), ("register_as", str)):
            if key in d and (not isinstance(d[key], typ) or isinstance(d[key], bool)):
                raise ConfigError(f"`search.{key}` must be {typ.__name__}, got {d[key]!r}")
        if "start_from_base" in d and not isinstance(d["start_from_base"], bool):
            raise ConfigError(f"`search.start_from_base` must be true or false, got {d['start_from_base']!r}")
        if "time_budget_min" in d and not _is_number(d["time_budget_min"]):
            raise ConfigError(f"`search.time_budget_min` must be a number, got {d['time_budget_min']!r}")
        params = tuple(Param.from_yaml(str(k), v) for k, v in space.items())
        return cls(space=params, asha=AshaConfig(**asha), **d)

    @property
    def trials(self) -> int:
        """Trials the search runs: num_samples, times the size of the grid when there are `grid` keys."""
        return self.num_samples * math.prod(len(p.values) for p in self.space if p.kind == "grid")

    def with_overrides(self, **values) -> SearchConfig:
        """CLI flags; None leaves the file's value."""
        return dataclasses.replace(self, **{k: v for k, v in values.items() if v is not None})

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("space", "asha")}
        d["asha"] = dataclasses.asdict(self.asha)
        d["space"] = {p.key: {p.kind: list(p.values)} for p in self.space}
        return d


def _read_space_file(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"--search-space {path}: file not found")
    space = yaml.safe_load(path.read_text(encoding="utf-8"))
    if isinstance(space, dict) and set(space) == {"space"}:  # a `space:` section on its own is accepted too
        space = space["space"]
    if not isinstance(space, dict) or not space:
        raise ConfigError(f"--search-space {path}: must map keys like model.heads to {{choice: [...]}} etc.")
    return space


@dataclass(frozen=True)
class TuneJob:
    """A job file with a `search:` section: the base job every trial overrides, and the search."""

    base: TrainingJob
    search: SearchConfig

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "<dict>") -> TuneJob:
        if not isinstance(d, dict):
            raise ConfigError(f"{source}: a tune file must be a mapping with job/model/train/search sections")
        d = dict(d)
        if "search" not in d:
            raise ConfigError(f"{source}: no `search` section (the search space and settings)")
        try:
            search = SearchConfig.from_dict(d.pop("search"))
        except ConfigError as err:
            raise ConfigError(f"{source}: {err}") from None
        job = cls(TrainingJob.from_dict(d, source), search)
        try:
            validate_space(job.base, job.search.space)
        except ConfigError as err:
            raise ConfigError(f"{source}: {err}") from None
        return job

    @classmethod
    def load(cls, path: str | Path, overrides: list[str] = (), space_file: str | Path | None = None,
             **search_overrides) -> TuneJob:
        """The tune file; `space_file` (a YAML mapping of keys to {choice: [...]} etc.) replaces its space."""
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"{path}: config file not found")
        d = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        source = str(path)
        if space_file is not None:
            space = _read_space_file(Path(space_file))
            if isinstance(d, dict):
                d = {**d, "search": {**(d.get("search") or {}), "space": space}}
            source = f"{path} with the space of {space_file}"
        if isinstance(d, dict):
            d, overrides = apply_early_overrides(d, list(overrides))
        tj = cls.from_dict(d, source)
        return tj.with_overrides(list(overrides), **search_overrides)

    def with_overrides(self, overrides: list[str] = (), **search_overrides) -> TuneJob:
        """`job.*`/`model.*`/`train.*` overrides of the base, and search settings by name; re-validated."""
        base = self.base.with_overrides(list(overrides)) if overrides else self.base
        search = self.search.with_overrides(**search_overrides)
        validate_space(base, search.space)
        return TuneJob(base, search)

    def to_dict(self) -> dict[str, Any]:
        return {**self.base.to_dict(), "search": self.search.to_dict()}

    def search_name(self) -> str:
        """What the search is: base shape, searched keys, scheduler, searcher, size; stable for resume."""
        s = self.search
        if s.name:
            return s.name
        m = self.base.run.model
        keep = {k: v for k, v in s.to_dict().items() if k not in ("time_budget_min", "name", "register_as")}
        body = json.dumps({"base": self.base.fingerprint(), "search": keep}, sort_keys=True, default=str)
        digest = hashlib.sha256(body.encode()).hexdigest()[:6]
        keys = "-".join(_SHORT.get(p.short, p.short) for p in s.space)
        return f"tune-{m.arch}-d{m.d_model}-L{m.layers}-{keys}-{s.scheduler}-{s.search}-n{s.num_samples}-{m.direction}-{digest}"


_SHORT = {"arch": "arch", "heads": "heads", "warmup": "warmup", "label_smoothing": "ls", "lr_scale": "lr", "dropout": "drop", "layers": "layers"}


def validate_space(base: TrainingJob, space: tuple[Param, ...]) -> None:
    """Every value of every key, alone and together with the others, must make a valid job.

    Raises ConfigError naming the key (and the combination) that cannot be used."""
    for p in space:
        section, _, name = p.key.partition(".")
        if section not in SEARCHABLE or not name:
            raise ConfigError(f"search space `{p.key}`: only model.* and train.* keys can be searched")
        fields = {f.name for f in dataclasses.fields(SEARCHABLE[section])}
        if name not in fields:
            raise ConfigError(f"search space `{p.key}`: unknown key; {section} keys are {sorted(fields)}")
        if section == "model" and name in ("src_lang", "tgt_lang", "vocab_size"):
            raise ConfigError(f"search space `{p.key}`: not a hyperparameter; set it in the `model` section")
        for value in p.candidates():
            try:
                apply_overrides(base, {p.key: value})
            except ConfigError as err:
                raise ConfigError(f"search space `{p.key}`: value {value!r} is not allowed: {err}") from None
    keys = [p.key for p in space]
    candidates = [p.candidates() for p in space]
    total = math.prod(len(c) for c in candidates)
    groups = [range(len(space))] if total <= MAX_COMBINATIONS else itertools.combinations(range(len(space)), 2)
    for group in groups:
        group = list(group)
        for combo in itertools.product(*(candidates[i] for i in group)):
            values = {keys[i]: v for i, v in zip(group, combo)}
            try:
                apply_overrides(base, values)
            except ConfigError as err:
                together = ", ".join(f"`{k}`={v!r}" for k, v in values.items())
                raise ConfigError(f"search space: {together} together are not allowed: {err}") from None


def apply_overrides(base: TrainingJob, values: dict[str, Any]) -> TrainingJob:
    """The base job with `{"model.heads": 4, ...}` applied; strict (types and ranges checked by the configs)."""
    d = base.to_dict()
    for key, value in values.items():
        section, name = key.split(".", 1)
        d[section][name] = _native(value)
    try:
        return TrainingJob.from_dict(d, "")
    except ConfigError as err:
        raise ConfigError(str(err).removeprefix(": ")) from None


def _native(value: Any) -> Any:
    """numpy scalars (Tune samples them) → Python numbers, which the strict configs accept."""
    return value.item() if hasattr(value, "item") and not isinstance(value, (str, bytes)) else value


def flat_trial_values(config: dict[str, Any]) -> dict[str, Any]:
    """Tune's nested trial config {"model": {"heads": 4}} → {"model.heads": 4}."""
    return {f"{section}.{k}": _native(v) for section, sub in config.items() if isinstance(sub, dict) for k, v in sub.items()}


def base_point(tj: "TuneJob") -> dict[str, dict[str, Any]]:
    """The base job's values of the searched keys, nested as Tune's trial configs are: the first trial."""
    values = tj.base.to_dict()
    point: dict[str, dict[str, Any]] = {}
    for p in tj.search.space:
        section, name = p.key.split(".", 1)
        point.setdefault(section, {})[name] = values[section][name]
    return point


def param_space(space: tuple[Param, ...]) -> dict[str, dict[str, Any]]:
    nested: dict[str, dict[str, Any]] = {}
    for p in space:
        section, name = p.key.split(".", 1)
        nested.setdefault(section, {})[name] = p.domain()
    return nested


# --------------------------------------------------------------------------- resources


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


# --------------------------------------------------------------------------- the trial


def _validation_callback():
    """Ray's TuneReportCallback, forwarding only validation reports (they carry dev BLEU).

    Step reports (train/loss every log interval) would reach ASHA without its metric and
    trip Tune's strict metric check."""
    from ray.tune.integration.ray_train import TuneReportCallback

    class ValidationReportCallback(TuneReportCallback):
        def after_report(self, run_context, metrics, checkpoint):
            if metrics and METRIC in metrics[0]:
                super().after_report(run_context, metrics, checkpoint)

    return ValidationReportCallback()


def unused_worker_groups(job_hex: str) -> set[str]:
    """Placement groups of this job (hex ids) that reserve CPUs and have no actor placed in them."""
    import ray

    total, free, prefix = ray.cluster_resources(), ray.available_resources(), "bundle_group_"
    return {key[len(prefix):] for key, amount in total.items()
            if key.startswith(prefix) and "_" not in key[len(prefix):]  # the whole group, not one bundle
            and key.endswith(job_hex) and f"CPU_group_{key[len(prefix):]}" in total and free.get(key, 0) >= amount}


def _release_callback():
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


def trial_job(base: TrainingJob, values: dict[str, Any], trial_id: str, plan: dict[str, Any]) -> TrainingJob:
    """The trial's job: base + sampled values, named by trial id and logged in the search's experiment."""
    job = apply_overrides(base, values)
    return apply_overrides(job, {
        "job.run_name": f"{trial_id}-{job.run_name()}", "job.workers": plan["workers"],
        "job.use_gpu": "yes" if plan["use_gpu"] else "no",
        "job.log_model": False,  # only the best trial's model is logged (and registered), after the search
    })


def _trial(config: dict[str, Any], *, base: dict[str, Any], ctx: dict[str, Any]) -> None:
    """A Tune trial: one Ray Train DDP run of the base job with this trial's values, as a child MLflow run."""
    import ray
    from ray import tune

    trial_id = tune.get_context().get_trial_id()
    job = trial_job(TrainingJob.from_dict(base), flat_trial_values(config), trial_id, ctx)
    _use_driver_settings(ctx)
    run = ray_training.open_mlflow_run(job, job.run_name(), job.job.train_data, ctx["parent_run_id"])
    run.set_tags({"mtcore.tune.trial_id": trial_id, "mtcore.tune.search": ctx["search_name"]})
    # Tune runs this function inside the trial's placement group, which holds no CPU, and Ray would
    # schedule every task started from here into it (the end-of-run test decoding needs a CPU). The
    # Train driver therefore runs as a task outside that group; it dies with the trial if Tune stops it.
    drive = ray.remote(num_cpus=0, max_retries=0)(_drive_training).options(scheduling_strategy="DEFAULT")
    try:
        outcome = ray.get(drive.remote(job.to_dict(), ctx, [_validation_callback()]))
    except Exception as err:
        cause = getattr(err, "cause", None) or err
        run.set_tags({"mtcore.tune.error": str(cause)[:4000]})
        run.end("FAILED")
        raise TuneError(f"trial {trial_id} failed: {cause}") from None
    run.set_tags({"mtcore.tune.stopped_early": "false"})
    last_loss = run.metrics().get("dev/loss", float("nan"))  # every result carries the rung metric
    tune.report({
        METRIC: outcome.best_dev_bleu, TIME_ATTR: outcome.steps, "dev/loss": last_loss,
        "final/test_bleu": outcome.test["test/bleu"], "final/test_chrf": outcome.test["test/chrf"],
        "final/test_bleu_signature": outcome.test["test/bleu_signature"],
        "final/best_checkpoint": str(outcome.best_checkpoint), "final/mlflow_run_id": run.run_id,
        "final/train_s": outcome.elapsed_s,
    })


def _use_driver_settings(ctx: dict[str, Any]) -> None:
    """Trials run in other processes: use the search driver's MLflow store and work directory."""
    os.environ["MLFLOW_TRACKING_URI"] = ctx["tracking_uri"]
    os.environ["MTCORE_HOME"] = ctx["runs_dir"]
    # The workers of a trial ASHA has just stopped are released asynchronously (`_release_callback`
    # removes their placement group UNUSED_GROUP_S after they are gone), which is longer than Train's
    # default 60 s wait for a worker group. The next trial waits instead of failing.
    os.environ.setdefault("RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S", str(WORKER_GROUP_START_TIMEOUT_S))


def _drive_training(job: dict[str, Any], ctx: dict[str, Any], callbacks: list):
    _use_driver_settings(ctx)
    return ray_training.run_training(TrainingJob.from_dict(job), parent_run_id=ctx["parent_run_id"], callbacks=callbacks)


# --------------------------------------------------------------------------- results


@dataclass
class TrialRow:
    trial_id: str
    values: dict[str, Any]
    status: str  # COMPLETED | STOPPED (early: ASHA or the search budget) | FAILED | UNFINISHED | NOT RUN
    steps: int
    best_dev_bleu: float
    test_bleu: float | None
    minutes: float  # time the trial held its workers (Tune's time_total_s)
    checkpoint: str | None  # best checkpoint (by dev BLEU) the trial left
    mlflow_run_id: str | None
    error: str = ""
    test: dict[str, Any] = field(default_factory=dict)  # test/bleu, test/chrf and signatures of a completed trial

    @property
    def stopped_early(self) -> bool:
        return self.status == "STOPPED"


@dataclass
class SearchOutcome:
    name: str
    path: Path
    parent_run_id: str
    plan: ResourcePlan
    rows: list[TrialRow]
    best: TrialRow | None = None
    test: dict[str, Any] = field(default_factory=dict)
    registered: str = ""  # "name/version" in the MLflow model registry
    interrupted: bool = False
    elapsed_s: float = 0.0

    @property
    def trial_minutes(self) -> float:
        return sum(r.minutes for r in self.rows)


def _trial_rows(grid) -> list[TrialRow]:
    ids = {t.path: t.trial_id for t in grid._experiment_analysis.trials}  # ResultGrid does not expose trial ids
    rows = []
    for result in grid:
        df = result.metrics_dataframe
        last = result.metrics or {}
        trial_id = ids.get(result.path) or last.get("trial_id", "?")
        values = flat_trial_values(result.config or {})
        steps, best, ckpt, minutes = 0, float("nan"), None, 0.0
        if df is not None and len(df) and METRIC in df:
            scored = df[df[METRIC].notna()]
            if len(scored):
                best = float(scored[METRIC].max())
                # Train keeps the best checkpoint by dev BLEU (and the latest); among equal scores, the one kept.
                for _, row in scored.sort_values([METRIC, TIME_ATTR], ascending=False).iterrows():
                    path = row.get("checkpoint_path")
                    if isinstance(path, str) and Path(path).exists():
                        ckpt = path
                        break
            steps = int(df[TIME_ATTR].max()) if TIME_ATTR in df else 0
            minutes = float(df["time_total_s"].max()) / 60 if "time_total_s" in df else 0.0
        if "final/best_checkpoint" in last:
            ckpt = last["final/best_checkpoint"]
        if result.error is not None:
            status = "FAILED"
        elif "final/test_bleu" in last:
            status = "COMPLETED"
        else:
            status = "STOPPED"
        rows.append(TrialRow(
            trial_id=str(trial_id), values=values, status=status, steps=steps, best_dev_bleu=best,
            test_bleu=last.get("final/test_bleu"), minutes=minutes, checkpoint=ckpt,
            mlflow_run_id=last.get("final/mlflow_run_id"),
            error=str(result.error).strip().splitlines()[-1][:200] if result.error is not None else "",
            test={k.replace("final/", "test/").replace("test/test_", "test/"): last[k] for k in
                  ("final/test_bleu", "final/test_chrf", "final/test_bleu_signature") if k in last},
        ))
    return sorted(rows, key=lambda r: r.trial_id)


def format_table(rows: list[TrialRow], space: tuple[Param, ...]) -> str:
    headers = ["trial"] + [p.short for p in space] + ["steps", "dev BLEU", "test BLEU", "min", "status", "stopped early"]
    lines = []
    for r in rows:
        cells = [r.trial_id.split("_")[-1]]
        for p in space:
            v = r.values.get(p.key, "")
            cells.append(f"{v:.4g}" if isinstance(v, float) else str(v))
        cells += [
            str(r.steps), "-" if math.isnan(r.best_dev_bleu) else f"{r.best_dev_bleu:.2f}",
            "-" if r.test_bleu is None else f"{r.test_bleu:.2f}", f"{r.minutes:.1f}",
            r.status + (f" ({r.error})" if r.error else ""), "yes" if r.stopped_early else "no",
        ]
        lines.append(cells)
    widths = [max(len(h), *(len(c[i]) for c in lines)) if lines else len(h) for i, h in enumerate(headers)]
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(headers), fmt(["-" * w for w in widths])] + [fmt(c) for c in lines])


# --------------------------------------------------------------------------- the driver


def registered_name(tj: TuneJob, arch: str | None = None) -> str:
    """`arch`: the best trial's, when the architecture was searched."""
    m = tj.base.run.model
    return tj.search.register_as or f"mtcore-{m.src_lang}-{m.tgt_lang}-{arch or m.arch}"


def _open_parent_run(tj: TuneJob, name: str, plan: ResourcePlan, train_data: str, resume: bool):
    """The search's own MLflow run (a `TrackedRun`); its trials are its children. `resume` continues it."""
    from mtcore import tracking
    from mtcore.tracking.run import open_run

    tags = tracking.standard_tags("experiments/tune_transformer.py", train_data) | {
        "mtcore.tune.scheduler": tj.search.scheduler, "mtcore.tune.search": tj.search.search,
        "mtcore.tune.resources": plan.describe(),
    }
    params = tracking.flatten(tj.base.to_dict(), "base.")
    params |= {f"space.{p.key}": p.describe() for p in tj.search.space}
    params |= tracking.flatten({k: v for k, v in tj.search.to_dict().items() if k != "space"}, "search.")
    params |= {"search.workers_per_trial_resolved": str(plan.workers_per_trial),
               "search.concurrent_trials_resolved": str(plan.concurrent_trials)}
    return open_run(tj.search.experiment, name, tags=tags, params=params, continue_named=resume)


def _scheduler(tj: TuneJob):
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

    if tj.search.scheduler == "fifo":
        return FIFOScheduler()  # the best trial is picked by dev BLEU afterwards, whatever the scheduler
    t, a = tj.base.run.train, tj.search.asha
    grace = a.grace_period or t.validate_every or 1
    # Rungs stay below the last step (a trial that trained to its end is not stopped before its test
    # evaluation); runs bounded by a time budget have no step limit of ASHA's own.
    max_t = a.max_t or (t.max_steps - 1 if t.max_steps else 10**9)
    # stop_last_trials=False: a trial that reaches max_t ends by itself (test BLEU, artifacts), not killed.
    return ASHAScheduler(time_attr=TIME_ATTR, metric=a.metric, mode=RUNG_METRICS[a.metric], grace_period=grace,
                         reduction_factor=a.reduction_factor, max_t=max(max_t, grace), stop_last_trials=False)


def _searcher(tj: TuneJob, concurrent: int):
    from ray.tune.search import BasicVariantGenerator

    points = [base_point(tj)] if tj.search.start_from_base else None
    if tj.search.search == "random":  # Tune ignores max_concurrent_trials for a generator: it limits itself
        return BasicVariantGenerator(random_state=tj.search.seed, max_concurrent=concurrent, points_to_evaluate=points)
    if importlib.util.find_spec("optuna") is None:
        raise TuneError("--search optuna needs the optional dependency optuna: pip install 'mtcore[optuna]' "
                        "(or use --search random)")
    from ray.tune.search.optuna import OptunaSearch

    return OptunaSearch(metric=METRIC, mode="max", seed=tj.search.seed, points_to_evaluate=points)


def plan_search(tj: TuneJob) -> ResourcePlan:
    """The search's resources on the cluster at hand (starting or joining Ray): what `--dry-run` prints."""
    from mtcore.distributed.cluster import available_cpus, available_gpus, init_ray

    init_ray()
    return plan_resources(tj.search, available_cpus(), available_gpus())


def run_search(tj: TuneJob, *, resume: bool = False, overwrite: bool = False, tune_callbacks: list | None = None,
               verbose: int = 1) -> SearchOutcome:
    """Run (or with `resume`, continue) the search; returns the table of trials and the best trial's test result.

    `tune_callbacks` are Ray Tune callbacks of the Tuner (e.g. to interrupt a search in tests)."""
    from ray import tune

    from mtcore.distributed.cluster import available_cpus, available_gpus, init_ray

    t0 = time.perf_counter()
    init_ray()
    plan = plan_resources(tj.search, available_cpus(), available_gpus())
    name = tj.search_name()
    storage = home() / "ray_tune"
    path = storage / name
    exists = (path / "tuner.pkl").is_file()
    if resume and not exists:
        raise TuneError(f"--resume: no search '{name}' in {storage} to continue (start it without --resume)")
    if exists and not resume:
        if not overwrite:
            raise TuneError(f"search '{name}' already exists in {path}: pass --resume to continue it, "
                            f"or --overwrite to start it again")
        shutil.rmtree(path)

    # Once, before any trial: the cleaned corpus and the tokenizer that every trial shares.
    train_data = ray_training.resolve_train_data(tj.base)
    ray_training.tokenizer_for(train_data, tj.base)
    base = tj.base.with_overrides([f"job.train_data={train_data}", f"job.experiment={tj.search.experiment}"])
    parent = _open_parent_run(tj, name, plan, train_data, resume)
    ctx = {
        "tracking_uri": parent.uri, "runs_dir": str(home()), "parent_run_id": parent.run_id,
        "search_name": name, "workers": plan.workers_per_trial, "use_gpu": plan.use_gpu,
    }
    # The trial only drives its Train run: no CPU of its own, or 2 workers could never start on 2 CPUs.
    # (Tune refuses an all-zero request; a little memory is what the driver does use.)
    trainable = tune.with_resources(tune.with_parameters(_trial, base=base.to_dict(), ctx=ctx), TRIAL_DRIVER_RESOURCES)
    # Tune stops a trial (ASHA, Ctrl-C) by asking its function to return and kills it only after
    # TUNE_FORCE_TRIAL_CLEANUP_S (600 s by default). A trial blocked in its Train run never returns by
    # itself, so its workers would keep their CPUs for 10 minutes while the next trial waits: kill it soon.
    os.environ.setdefault("TUNE_FORCE_TRIAL_CLEANUP_S", str(STOPPED_TRIAL_KILL_S))
    if resume:
        tuner = tune.Tuner.restore(str(path), trainable=trainable)
    else:
        tuner = tune.Tuner(
            trainable,
            param_space=param_space(tj.search.space),
            tune_config=tune.TuneConfig(
                num_samples=tj.search.num_samples, scheduler=_scheduler(tj),  # metric: set on each of them
                search_alg=_searcher(tj, plan.concurrent_trials),
                max_concurrent_trials=plan.concurrent_trials if tj.search.search != "random" else None,
                time_budget_s=tj.search.time_budget_min * 60 or None,
            ),
            run_config=tune.RunConfig(name=name, storage_path=str(storage), verbose=verbose,
                                     callbacks=[_release_callback(), *(tune_callbacks or [])]),
        )
    fit_start = time.perf_counter()
    grid = tuner.fit()
    budget = tj.search.time_budget_min * 60
    budget_hit = bool(budget) and time.perf_counter() - fit_start >= budget - 5
    rows = _trial_rows(grid)
    unfinished = _unfinished_ids(grid)
    for r in rows:
        if r.trial_id in unfinished:  # never started, or running when the search ended
            r.status = ("STOPPED" if r.steps else "NOT RUN") if budget_hit else "UNFINISHED"
    outcome = SearchOutcome(name, path, parent.run_id, plan, rows)
    _close_children(parent, rows)
    if not budget_hit and (unfinished or len(rows) < _expected_trials(tj)):
        outcome.interrupted = True  # Ctrl-C (or a callback) ended the search: --resume continues it
        parent.end("KILLED")
    else:
        _finish_search(tj, base, outcome, parent, ctx)
    outcome.elapsed_s = time.perf_counter() - t0
    return outcome


def _expected_trials(tj: TuneJob) -> int:
    return tj.search.trials


def _unfinished_ids(grid) -> set[str]:
    analysis = grid._experiment_analysis  # the trial statuses ResultGrid does not expose
    return {t.trial_id for t in analysis.trials if t.status not in ("TERMINATED", "ERROR")}


def _close_children(parent, rows: list[TrialRow]) -> None:
    """Child runs of trials ASHA (or the budget) stopped: their process was killed mid-run, so end them here."""
    children = parent.children("mtcore.tune.trial_id")
    for r in rows:
        run = children.get(r.trial_id)
        if run is None:
            continue
        r.mlflow_run_id = run.run_id
        status = run.status()
        if r.status == "STOPPED" and status in ("RUNNING", "FAILED"):
            run.set_tags({"mtcore.tune.stopped_early": "true"})
            run.end("KILLED")
        elif r.status == "FAILED" and status != "FAILED":
            run.end("FAILED")


def _finish_search(tj: TuneJob, base: TrainingJob, outcome: SearchOutcome, parent, ctx: dict[str, Any]) -> None:
    """The best trial: its test BLEU (evaluated here if ASHA stopped it), its model registered; the parent closed."""
    from mtcore.distributed.ray_training import finish_run
    from mtcore.tracking.pyfunc import log_translator, register_translator
    from mtcore.tracking.run import TrackedRun

    finished_before = parent.tags().get("mtcore.tune.finished") == "true"
    candidates = [r for r in outcome.rows if r.status in ("COMPLETED", "STOPPED") and r.checkpoint and not math.isnan(r.best_dev_bleu)]
    counts = {s: sum(r.status == s for r in outcome.rows) for s in ("COMPLETED", "STOPPED", "FAILED")}
    parent.log_metrics({"trials/completed": counts["COMPLETED"], "trials/stopped_early": counts["STOPPED"],
                        "trials/failed": counts["FAILED"], "trial_minutes": outcome.trial_minutes})
    _log_table(parent, outcome.rows, tj.search.space)
    if not candidates:
        parent.end("FAILED")
        return
    best = max(candidates, key=lambda r: r.best_dev_bleu)
    outcome.best = best
    best_run = TrackedRun(parent.uri, best.mlflow_run_id)
    if finished_before:  # --resume of a search that had ended: report it, evaluate and register nothing again
        metrics, tags = best_run.metrics(), best_run.tags()
        outcome.test = {"test/bleu": metrics.get("test/bleu", float("nan")),
                        "test/chrf": metrics.get("test/chrf", float("nan")),
                        "test/bleu_signature": tags.get("sacrebleu.bleu_signature", "")}
        outcome.registered = parent.tags().get("mtcore.tune.registered_model", "")
        parent.end("FINISHED")
        return
    job = trial_job(base, best.values, best.trial_id, ctx)
    best_dir = Path(best.checkpoint)
    if best.status == "COMPLETED":
        test = best.test
    else:  # ASHA stopped the best trial: evaluate its best checkpoint now, as a finished trial would have been
        inputs = ray_training.prepare_inputs(job, parent.run_id)
        test = finish_run(job, inputs, best_dir, ctx["use_gpu"])
        inputs.run.set_tags({"mtcore.tune.stopped_early": "true"})
        best.test_bleu = test["test/bleu"]
    outcome.test = test
    info = log_translator(best_dir, run=best_run)
    best_run.set_tags({"mtcore.tune.best": "true"})
    if tj.search.register_as != "-":
        outcome.registered = register_translator(info.model_uri, registered_name(tj, best.values.get("model.arch")), tags={
            "search": outcome.name, "trial_id": best.trial_id, "dev_bleu": f"{best.best_dev_bleu:.2f}",
            "test_bleu": f"{test['test/bleu']:.2f}", "mlflow_run_id": best.mlflow_run_id,
        })
        parent.set_tags({"mtcore.tune.registered_model": outcome.registered})
    parent.log_metrics({"best/dev_bleu": best.best_dev_bleu, "best/test_bleu": test["test/bleu"],
                        "best/test_chrf": test["test/chrf"]})
    parent.set_tags({
        "mtcore.tune.best_trial": best.trial_id, "mtcore.tune.best_run_id": best.mlflow_run_id,
        "mtcore.tune.best_config": json.dumps(best.values), "sacrebleu.bleu_signature": test["test/bleu_signature"],
        "mtcore.tune.finished": "true",
    })
    parent.end("FINISHED")


def _log_table(run, rows: list[TrialRow], space: tuple[Param, ...]) -> None:
    from mtcore.tracking.run import log_files

    records = [{**dataclasses.asdict(r), "stopped_early": r.stopped_early} for r in rows]
    log_files(run, {"trials.txt": format_table(rows, space) + "\n",
                    "trials.json": json.dumps(records, indent=2, default=str)})
