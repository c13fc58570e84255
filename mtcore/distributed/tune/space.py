"""The search space: the `search:` section of a job file and the values each trial overrides.

Each key is a `model.*` or `train.*` field; each sampled value becomes an override of the base
`TrainingJob`. Every value of every choice and both ends of every range are checked against
`ModelConfig` / `TrainConfig` (alone and in combination) before any trial starts. `model.arch` may be
searched (`{choice: [transformer, rnn]}`), so that one MLflow comparison shows both architectures;
every other key is checked against each architecture in the space.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import itertools
import json
import logging
import math
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from mtcore.errors import MtcoreError
from mtcore.config import BEST_METRICS, ConfigError, ModelConfig, TrainConfig, load_yaml, parse_value, yaml11_float
from mtcore.distributed.jobs import TrainingJob, apply_early_overrides

log = logging.getLogger(__name__)


# The search `tune_transformer.py` / `mtcore tune` runs without --config; package data, so a wheel has it.
DEFAULT_SEARCH = Path(__file__).parent.parent / "default_search.yaml"
METRIC = "dev/bleu"  # what ASHA and the searchers maximise; reported at each validation
TIME_ATTR = "step"  # ASHA's clock: the training step of the validation
RUNG_METRICS = dict(BEST_METRICS.values())  # what ASHA may compare at its rungs: the metrics that can pick a checkpoint
KINDS = ("choice", "grid", "uniform", "loguniform", "randint")
SCHEDULERS = ("asha", "halving", "fifo")
SEARCHERS = ("random", "optuna")
MAX_COMBINATIONS = 20_000  # beyond this, combinations are checked pairwise instead of all together
RANDINT_CHECKED = 256  # a randint range this narrow has every value checked, not only its ends
SEARCHABLE = {"model": ModelConfig, "train": TrainConfig}


class TuneError(MtcoreError, RuntimeError):
    """A search that cannot start or finish; the message says why."""


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
            nested = f" (a nested `{key}: {{{kind}: …}}`? write the key dotted: `{key}.{kind}: {{choice: […]}}`)" \
                if key in SEARCHABLE else ""
            raise ConfigError(f"{where}: unknown kind {kind!r}; choose from {list(KINDS)}{nested}")
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{where}: {kind} needs a non-empty list, got {values!r}")
        values = [_number_or_text(v) for v in values]  # YAML 1.1 reads 1e-4 as text; a job file takes it as a number
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
        """The values a config check must accept: every listed value, every integer of a `randint` range (up to
        `RANDINT_CHECKED` of them: `heads` in [2, 8] samples 3, which does not divide d_model 64), or both ends of a range."""
        if self.kind == "randint" and self.values[1] - self.values[0] < RANDINT_CHECKED:
            return tuple(range(self.values[0], self.values[1] + 1))
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


# Job keys each trial sets for itself: in a search they were accepted and silently replaced.
TRIAL_KEYS = {"workers": "--workers-per-trial", "use_gpu": "--gpus-per-worker", "run_name": "search.name",
              "experiment": "search.experiment"}


def _refuse_trial_keys(job: dict, source: str) -> None:
    given = [k for k in job if k in TRIAL_KEYS]
    if given:
        raise ConfigError(f"{source}: {', '.join(f'job.{k}' for k in given)} is set per trial by the search; use "
                          f"{', '.join(TRIAL_KEYS[k] for k in given)}")


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _number_or_text(v: Any) -> Any:
    """`1e-4` (which YAML 1.1 leaves a string) as the float it is; anything else as it is."""
    if isinstance(v, str):
        number = yaml11_float(v)
        return v if number is None else number
    return v


@dataclass(frozen=True)
class AshaConfig:
    """The rungs of successive halving, with the training step as its clock: asynchronous (`asha`, Li et al. 2020)
    or synchronous (`halving`)."""

    metric: str = METRIC  # what the rungs compare: dev/bleu (higher is better) or dev/loss (lower is better)
    grace_period: int = 0  # steps before the first cut; 0 = the first validation (train.validate_every)
    reduction_factor: int = 2  # keep the top 1/rf at each rung; 2 suits searches of a handful of trials
    max_t: int = 0  # 0 = train.max_steps, or unbounded when runs stop on a time budget

    def __post_init__(self):
        for name in ("grace_period", "reduction_factor", "max_t"):  # "100" or 2.5 failed deep in Tune, or ran
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"`search.asha.{name}` must be an integer, got {value!r}")
        if not isinstance(self.metric, str) or self.metric not in RUNG_METRICS:
            raise ConfigError(f"`search.asha.metric` {self.metric!r}: choose from {list(RUNG_METRICS)}")
        if self.max_t and self.max_t < self.grace_period:
            raise ConfigError(f"`search.asha.max_t` ({self.max_t}) is below `grace_period` ({self.grace_period}): "
                              "no trial could reach a rung")
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
        if self.seed < 0:  # numpy's generators take none, and the parent run would be open by then
            raise ConfigError(f"`search.seed` ({self.seed}) must be >= 0")
        for name in ("workers_per_trial", "concurrent_trials"):
            if getattr(self, name) < 0:
                raise ConfigError(f"`search.{name}` ({getattr(self, name)}) must be >= 0 (0 = automatic)")
        if self.gpus_per_worker not in (-1, 0, 1):
            raise ConfigError(
                f"`search.gpus_per_worker` ({self.gpus_per_worker}) must be 0 or 1: each Train worker "
                "holds a whole GPU (fractional sharing is not supported by mtcore.distributed.ray_training)"
            )
        if not self.time_budget_min >= 0 or not math.isfinite(self.time_budget_min):  # nan meant "no budget"
            raise ConfigError(f"`search.time_budget_min` ({self.time_budget_min}) must be a finite number >= 0")
        if self.search == "optuna" and any(p.kind == "grid" for p in self.space):
            raise ConfigError("`grid` keys need the random search; use `choice` with optuna")
        if self.start_from_base and any(p.kind == "grid" for p in self.space):
            raise ConfigError("`search.start_from_base` and `grid` keys do not mix: a grid already names every trial; "
                              "add search.start_from_base=false to the command (the default search starts from the base)")
        if not self.space:
            raise ConfigError("`search.space` is empty: name at least one model.* or train.* key to search")
        # The search's folder is runs/ray_tune/NAME, which --overwrite deletes: `..` deleted the whole workspace.
        if self.name and (not re.fullmatch(r"[\w.+-]+", self.name) or self.name in (".", "..")):
            raise ConfigError(f"`search.name` {self.name!r}: a search name is one folder name (letters, digits, _ . + -); "
                              "searches are kept under runs/ray_tune/NAME")
        if not str(self.experiment).strip():
            raise ConfigError("`search.experiment` is empty: name the MLflow experiment (default tune_transformer)")

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
        if "time_budget_min" in d:
            d["time_budget_min"] = _number_or_text(d["time_budget_min"])
        if "time_budget_min" in d and not _is_number(d["time_budget_min"]):
            raise ConfigError(f"`search.time_budget_min` must be a finite number, got {d['time_budget_min']!r}")
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


def _apply_search_overrides(data: dict, overrides: list[str]) -> tuple[dict, list[str]]:
    """`search.name=x`, `search.asha.grace_period=200`, `search.start_from_base=false`: a search setting from the
    command line, as model./train. ones are (checked by `SearchConfig.from_dict` with the file's); the space
    itself comes from --search-space. Returns (data with them, the other overrides)."""
    mine = [o for o in overrides if o.split("=", 1)[0].strip().startswith("search.")]
    if not mine or not isinstance(data.get("search") or {}, dict):
        return data, [o for o in overrides if o not in mine]  # a `search:` that is no mapping: from_dict says so
    search = dict(data.get("search") or {})
    for item in mine:
        key, sep, raw = item.partition("=")
        path = key.strip().split(".")[1:]
        if not sep or not path or not all(path):
            raise ConfigError(f"override {item!r}: expected search.KEY=VALUE")
        if path[0] == "space":
            raise ConfigError(f"override {item!r}: the space comes from the tune file or --search-space FILE")
        value = _search_value(path, raw)
        node = search
        for part in path[:-1]:
            node[part] = dict(node.get(part) or {}) if isinstance(node.get(part) or {}, dict) else node.get(part)
            node = node[part]
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r}: search.{part} is not a section")
        node[path[-1]] = value
    return {**data, "search": search}, [o for o in overrides if o not in mine]


def _search_value(path: list[str], raw: str) -> Any:
    """The value of `search.KEY=RAW`, parsed to the type its field declares, as model./train. overrides are
    (`parse_value`): text stays text (`register_as=-`, `experiment=on`; YAML made them [None] and True), a
    boolean takes yes/no/1/0. A key no setting has keeps its text, for `SearchConfig.from_dict` to name."""
    import yaml

    owner = {1: SearchConfig, 2: AshaConfig if path[0] == "asha" else None}.get(len(path))
    typ = typing.get_type_hints(owner).get(path[-1]) if owner else None
    key = "search." + ".".join(path)
    if typ is bool:
        try:
            return parse_value(raw, bool, key)
        except ConfigError:
            raise ConfigError(f"`{key}` must be true or false (or yes/no, 1/0), got {raw.strip()!r}") from None
    if typ in (str, int, float):
        return parse_value(raw, typ, key)
    if typ is None:
        return raw.strip()
    try:  # a section given whole: search.asha={grace_period: 100}
        return yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw.strip()


def _read_space_file(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"--search-space {path}: file not found")
    space = load_yaml(path)
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
        _refuse_trial_keys(d.get("job") or {}, source)
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
        d = load_yaml(path) or {}
        source = str(path)
        if space_file is not None:
            space = _read_space_file(Path(space_file))
            if isinstance(d, dict):
                d = {**d, "search": {**(d.get("search") or {}), "space": space}}
            source = f"{path} with the space of {space_file}"
        if isinstance(d, dict):
            d, overrides = apply_early_overrides(d, list(overrides))
            d, overrides = _apply_search_overrides(d, list(overrides))
        tj = cls.from_dict(d, source)
        return tj.with_overrides(list(overrides), **search_overrides)

    def with_overrides(self, overrides: list[str] = (), **search_overrides) -> TuneJob:
        """`job.*`/`model.*`/`train.*` overrides of the base, and search settings by name; re-validated."""
        _refuse_trial_keys({o.split("=", 1)[0].removeprefix("job."): None for o in overrides if o.startswith("job.")},
                           "the command line")
        base = self.base.with_overrides(list(overrides)) if overrides else self.base
        search = self.search.with_overrides(**search_overrides)
        validate_space(base, search.space)
        searched = {p.key: p for p in search.space}
        for key in dict.fromkeys(o.split("=", 1)[0] for o in overrides if o.split("=", 1)[0] in searched):
            what = ("sets only the first trial, the base job (search.start_from_base)" if search.start_from_base
                    else "changes no trial")
            log.warning("%s is searched (%s): the override %s; leave it out of the search space to fix it",
                        key, searched[key].describe(), what)
        return TuneJob(base, search)

    def to_dict(self) -> dict[str, Any]:
        return {**self.base.to_dict(), "search": self.search.to_dict()}

    # How many trials run at once changes no trial's result (workers per trial do: they make a step's batch).
    RESOURCE_KEYS = ("concurrent_trials",)

    def _settings(self, plan=None) -> dict:
        """The search's settings with the workers a trial gets as the plan resolved them: `--workers-per-trial 2`
        restated at its default is the same search (its name and digest differed, and --resume did not find it)."""
        keep = {k: v for k, v in self.search.to_dict().items() if k not in ("name", "register_as") + self.RESOURCE_KEYS}
        if plan is not None:
            keep |= {"workers_per_trial": plan.workers_per_trial, "gpus_per_worker": int(plan.use_gpu)}
        return keep

    def settings_digest(self, data_version: str = "", plan=None) -> str:
        """Everything a search's results depend on, its time budget included: a resumed search must have them all
        (Tune restores its own pickled copy and would ignore new ones)."""
        body = json.dumps({"base": self.base.fingerprint(data_version), "search": self._settings(plan)}, sort_keys=True, default=str)
        return hashlib.sha256(body.encode()).hexdigest()[:12]

    def search_name(self, data_version: str = "", plan=None) -> str:
        """What the search is: base shape, searched keys, scheduler, searcher, size, and (given) the training
        data's version, so that a search on regenerated data is another search; stable for resume."""
        s = self.search
        if s.name:
            return s.name
        m = self.base.run.model
        keep = {k: v for k, v in self._settings(plan).items() if k != "time_budget_min"}
        body = json.dumps({"base": self.base.fingerprint(data_version), "search": keep}, sort_keys=True, default=str)
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
            close = difflib.get_close_matches(section, list(SEARCHABLE), 1)
            hint = f"; did you mean `{close[0]}.{name}`?" if close and name else ""
            raise ConfigError(f"search space `{p.key}`: only model.* and train.* keys can be searched{hint}")
        fields = {f.name for f in dataclasses.fields(SEARCHABLE[section])}
        if name not in fields:
            close = difflib.get_close_matches(name, sorted(fields), 1)
            hint = f"did you mean `{section}.{close[0]}`? " if close else ""
            raise ConfigError(f"search space `{p.key}`: unknown key; {hint}{section} keys are {sorted(fields)}")
        if section == "model" and name in ("src_lang", "tgt_lang", "vocab_size"):
            raise ConfigError(f"search space `{p.key}`: not a hyperparameter; set it in the `model` section")
        declared = {f.name: f.type for f in dataclasses.fields(SEARCHABLE[section])}[name]
        if p.kind in ("uniform", "loguniform") and str(declared).startswith("int"):  # samples 213.7 for an int field
            raise ConfigError(f"search space `{p.key}`: an integer key; {p.kind} samples fractions: use randint or choice")
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
