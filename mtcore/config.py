"""Typed, strict configuration for models and training runs.

Defaults are the paper's ("Attention Is All You Need", §5-6) and live here once: the
CLI, the YAML files under `experiments/` and Ray Tune's search space all read them
from these dataclasses. Loading is strict: unknown keys are an error that lists them,
and a value of the wrong type is an error that names the key.

    cfg = RunConfig.from_dict(yaml.safe_load(text))
    cfg = cfg.with_overrides(["model.heads=4", "train.warmup=2000"])
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mtcore.errors import MtcoreError

ARCHS = ("transformer", "rnn")  # rnn: the attention RNN encoder-decoder of `mtcore.nmt.rnn`
RNN_CELLS = ("gru", "lstm")
RNN_ATTENTIONS = ("bahdanau", "dot", "general")  # additive (Bahdanau et al. 2015); Luong et al. 2015 §3.1


class ConfigError(MtcoreError, ValueError):
    """A configuration that cannot be used; the message names the key at fault."""


def _unique_keys_loader():
    """PyYAML's safe loader, but a key given twice in one mapping is an error (PyYAML keeps the last silently).
    Merge keys (`<<: *anchor`) are YAML's own: the mapping's keys are checked, and then win over the merged ones."""
    import yaml

    class UniqueKeys(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # super() flattens them (`<<` has no constructor)
                    continue
                key = self.construct_object(key_node, deep=deep)
                try:
                    hash(key)
                except TypeError:
                    continue  # PyYAML's own error names an unhashable key
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while reading a mapping", node.start_mark,
                        f"key {key!r} given twice (first at line {seen[key] + 1})", key_node.start_mark)
                seen[key] = key_node.start_mark.line
            return super().construct_mapping(node, deep)

    return UniqueKeys


def load_yaml(path: str | Path) -> Any:
    """A YAML file's contents; unreadable text or bad syntax is an error naming the file and line."""
    import yaml

    path = Path(path)
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: invalid UTF-8 (byte {raw[err.start]:#04x}); save the file as UTF-8") from None
    try:
        return yaml.load(text, Loader=_unique_keys_loader())
    except yaml.YAMLError as err:
        mark, context = getattr(err, "problem_mark", None), getattr(err, "context_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        what = getattr(err, "problem", None) or str(err)
        if getattr(err, "context", None):  # e.g. "while parsing a flow sequence", where the unclosed [ is
            what += f" ({err.context}" + (f" at line {context.line + 1})" if context is not None else ")")
        raise ConfigError(f"{path}{where}: not valid YAML: {what}") from None


# --------------------------------------------------------------------------- model


@dataclass(frozen=True)
class ModelConfig:
    """Encoder-decoder shape. Defaults: the base model of Vaswani et al. 2017, Table 3.

    `arch: rnn` selects the attention RNN encoder-decoder (`mtcore.nmt.rnn`): `d_model` is then the
    (shared, tied) embedding size, `layers` the recurrent layers of encoder and decoder, and
    the `rnn_*` keys, `input_feeding` and `teacher_forcing` apply; `heads` and `d_ff` do not.
    """

    arch: str = "transformer"  # transformer | rnn
    vocab_size: int = 0  # 0 = take it from the tokenizer when the model is built
    d_model: int = 512
    layers: int = 6  # N, the same for encoder and decoder
    heads: int = 8
    d_ff: int = 2048
    rnn_cell: str = "lstm"  # gru | lstm (rnn only)
    rnn_hidden: int = 0  # rnn only: decoder units = 2 x encoder units per direction; 0 = d_model
    rnn_attention: str = "general"  # bahdanau | dot | general (rnn only); general: Luong's best with input feeding
    input_feeding: bool = True  # rnn only: the last attentional vector is fed to the next step (Luong §3.3)
    teacher_forcing: float = 1.0  # rnn only: probability of feeding the gold previous token (the reference code: 0.5)
    dropout: float = 0.1  # residual + embedding dropout, §5.4
    attention_dropout: float = 0.0  # the paper drops residuals only; the Annotated Transformer also drops attention
    pre_norm: bool = False  # True: LayerNorm before each sublayer (Wang et al. 2019), steadier for deep/large-lr runs
    max_positions: int = 1024  # rows of the sinusoid table; longer inputs are an error
    src_lang: str = "en"
    tgt_lang: str = "vi"

    def __post_init__(self):
        for name in ("src_lang", "tgt_lang"):  # one spelling per code, as --langs reads them: EN is en, zh_CN is zh_cn
            if isinstance(getattr(self, name), str):
                object.__setattr__(self, name, getattr(self, name).lower())
        if self.arch not in ARCHS:
            raise ConfigError(f"`arch` {self.arch!r} is not available; choose from {list(ARCHS)}")
        for name in ("d_model", "layers", "heads", "d_ff", "max_positions"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"`{name}` ({getattr(self, name)}) must be positive")
        if self.vocab_size < 0:
            raise ConfigError(f"`vocab_size` ({self.vocab_size}) must be >= 0 (0 = from the tokenizer)")
        if self.rnn_cell not in RNN_CELLS:
            raise ConfigError(f"`rnn_cell` {self.rnn_cell!r}: choose from {list(RNN_CELLS)}")
        if self.rnn_attention not in RNN_ATTENTIONS:
            raise ConfigError(f"`rnn_attention` {self.rnn_attention!r}: choose from {list(RNN_ATTENTIONS)}")
        if self.rnn_hidden < 0:
            raise ConfigError(f"`rnn_hidden` ({self.rnn_hidden}) must be >= 0 (0 = d_model)")
        if not 0.0 <= self.teacher_forcing <= 1.0:
            raise ConfigError(f"`teacher_forcing` ({self.teacher_forcing}) must be in [0, 1]")
        if self.arch == "transformer":
            if self.d_model % self.heads:
                raise ConfigError(f"`heads` ({self.heads}) must divide `d_model` ({self.d_model})")
            if self.d_model % 2:
                raise ConfigError(f"`d_model` ({self.d_model}) must be even: sinusoidal positions pair sin and cos")
        elif (self.rnn_hidden or self.d_model) % 2:
            which = "rnn_hidden" if self.rnn_hidden else "d_model"
            raise ConfigError(f"`{which}` ({self.rnn_hidden or self.d_model}) must be even: "
                              "the bidirectional encoder gives each direction half")
        for name in ("dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"`{name}` ({getattr(self, name)}) must be in [0, 1)")
        if self.src_lang == self.tgt_lang:
            raise ConfigError(f"`src_lang` and `tgt_lang` are both {self.src_lang!r}")

    @property
    def direction(self) -> str:
        return f"{self.src_lang}-{self.tgt_lang}"

    @classmethod
    def preset(cls, name: str, **overrides) -> ModelConfig:
        if name not in PRESETS:
            raise ConfigError(f"unknown model preset {name!r}; choose from {sorted(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        """Strict: unknown keys and wrong types are errors. A `preset` key picks the starting point."""
        _check_mapping(d, "model")  # before dict() reads a list of pairs as one
        d = dict(d)
        base = PRESETS[_check_preset(d.pop("preset"))] if "preset" in d else {}
        return _from_dict(cls, {**base, **d}, "model")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def with_overrides(self, overrides: list[str]) -> ModelConfig:
        return _apply_overrides(self, overrides, "model")


PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(d_model=64, layers=2, heads=4, d_ff=256),  # unit tests; fp32 CPU budgets up to ~10 minutes
    "mini": dict(d_model=128, layers=2, heads=4, d_ff=512),  # CPU budgets of a few minutes: more steps per minute
    "small": dict(d_model=256, layers=3, heads=4, d_ff=1024),  # CPU runs of minutes
    "base": dict(d_model=512, layers=6, heads=8, d_ff=2048, dropout=0.1),  # Table 3, "base"
    "big": dict(d_model=1024, layers=6, heads=16, d_ff=4096, dropout=0.3),  # Table 3, "big" (EN-DE dropout)
}


AUTO = "auto"  # a preset chosen from the time budget and the hardware: `auto_settings`

# The `auto` rule, from benchmarks/budget_curve.py (benchmarks/RESULTS.md, "Which model for which budget"),
# 2 CPU cores, 3,000 tokens per step, test BLEU: `tiny` won at 5 and 10 minutes (18.3, 20.5) over `mini`
# (14.4, 19.8) and `small` (1.2, 14.4); at 20 minutes `mini` (29.8) beat `small` (21.7), and at 40 minutes
# `mini` (35.98) still beat `small` (32.80), the gap closing. Budgets beyond 40 minutes are not measured and
# keep the winner of the longest one. GPUs train the paper's base model.
# Rows: (minutes of training at most, preset); the last also covers "no budget".
# Those runs were fp32. On a CPU with native bf16 (`train.bf16`, mtcore.nmt.precision) every step is ~1.7x
# faster, and `mini` won at 5 and 10 minutes too (23.5 and 28.6 against tiny's 19.4 and 24.7; RESULTS.md,
# "bf16 on the CPU"): AUTO_CPU_RULE_BF16. Its budgets over 10 minutes lean on the fp32 runs (`small` not re-run).
AUTO_CPU_RULE: tuple[tuple[float, str], ...] = ((10.0, "tiny"), (float("inf"), "mini"))
AUTO_CPU_RULE_BF16: tuple[tuple[float, str], ...] = ((float("inf"), "mini"),)
AUTO_MEASURED_MIN = 40.0  # the longest budget measured
AUTO_MEASURED_MIN_BF16 = 10.0
# Dropout 0 on such budgets: the 11-minute bf16 default (mini, 2,683 steps, under 2 epochs) scored 30.49 test BLEU with
# dropout 0.1 and 31.99 without (3,130 steps: no masks to draw), its dev loss lower at every validation (RESULTS.md,
# "bf16 on the CPU"); in fp32 on another machine 27.70 with and 29.79 without (1,605 vs 1,901 steps; RESULTS.md, "bf16
# only where it measures faster"). Measured with mini at 11 minutes, and with tiny in fp32 at 800 steps (a 6-minute
# cap, the default search's trials): 19.35 test BLEU without, 15.44 with (RESULTS.md, Tune run 10). Longer budgets keep 0.1.
AUTO_NO_DROPOUT_MAX_MIN = 11.0
# What the measured CPU runs used with every preset: small per-worker batches, a short warm-up and
# pre-norm (steady at the higher learning rate a run of a few hundred steps needs).
# Checkpoint averaging: 8 snapshots 25 steps apart won on dev in benchmarks/checkpoint_average.py (11 minutes, mini);
# the run keeps the mean only if it validates better than the last weights.
AUTO_CPU_TRAIN: dict[str, Any] = dict(max_tokens=1500, warmup=300, lr_scale=1.0, validate_every=200, dev_limit=400,
                                      patience=4, max_epochs=50, log_every=25, average_last=8, average_every=25)
# GPUs: one batch of 16,384 tokens per update, not two of 8,192 (the same tokens and loss per update): on an H200 the
# base step at 8,192 tokens waited for the host (33 ms where its GPU work takes about 14), and 4x the tokens ran 2.3x as
# many tokens a second (benchmarks/RESULTS.md, "Training speed on a GPU"; 16,384 itself is bracketed, not timed).
AUTO_GPU_TRAIN: dict[str, Any] = dict(max_tokens=16384, accumulation=1, warmup=4000, validate_every=2000, dev_limit=1000,
                                      beam=4, patience=5, max_epochs=100)


def auto_settings(budget_min: float, gpus: int, cpu_bf16: bool = False) -> tuple[dict[str, Any], dict[str, Any], str]:
    """(model keys, train keys, why) for `preset: auto`; explicit keys of the job still win over these.
    `cpu_bf16`: the CPU workers train in bf16 (a CPU with native bf16 and `train.bf16` on)."""
    if gpus:
        why = (f"auto: {gpus} GPU(s) -> base, the paper's model and schedule (Vaswani et al. 2017, Table 3); "
               "its batch follows a speed measurement on one H200; no BLEU measured on a GPU backs the rule yet")
        return dict(PRESETS["base"]), dict(AUTO_GPU_TRAIN), why
    limit = budget_min if budget_min > 0 else float("inf")
    preset = next(name for bound, name in (AUTO_CPU_RULE_BF16 if cpu_bf16 else AUTO_CPU_RULE) if limit <= bound)
    budget = f"a budget of {budget_min:g} min" if budget_min > 0 else "no time budget"
    if cpu_bf16:
        measured = ("the best test BLEU at 5 and 10 min in bf16 in benchmarks/budget_curve.py" if limit <= AUTO_MEASURED_MIN_BF16
                    else f"the best at 10 min in bf16 and at 20-{AUTO_MEASURED_MIN:g} min in fp32 in benchmarks/budget_curve.py"
                    + (" (longer budgets are not measured)" if limit > AUTO_MEASURED_MIN else ""))
    else:
        measured = ("the best test BLEU for such a budget in benchmarks/budget_curve.py" if limit <= AUTO_MEASURED_MIN else
                    f"the best at {AUTO_MEASURED_MIN:g} min in benchmarks/budget_curve.py (longer budgets are not measured)")
    no_dropout = limit <= AUTO_NO_DROPOUT_MAX_MIN
    why = (f"auto: CPU workers{' with bf16' if cpu_bf16 else ''} and {budget} -> {preset} "
           f"({PRESETS[preset]['d_model']}d, {PRESETS[preset]['layers']} layers{', no dropout' if no_dropout else ''}), {measured}")
    model = {**PRESETS[preset], "pre_norm": True} | ({"dropout": 0.0} if no_dropout else {})
    return model, dict(AUTO_CPU_TRAIN), why


def _check_preset(name: Any) -> str:
    if name not in PRESETS:
        raise ConfigError(f"unknown model preset {name!r}; choose from {sorted(PRESETS)}")
    return name


# --------------------------------------------------------------------------- training


BEST_METRICS = {"bleu": ("dev/bleu", "max"), "loss": ("dev/loss", "min")}


@dataclass(frozen=True)
class TrainConfig:
    """One training run. Optimiser and schedule: §5.3; regularisation: §5.4; decoding: §6.1."""

    max_tokens: int = 4096  # padded tokens per batch per rank: max(src, tgt len) x rows
    accumulation: int = 1  # batches per optimiser step (effective batch = max_tokens x accumulation x ranks)
    lr_scale: float = 1.0  # multiplies the schedule d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
    warmup: int = 4000
    label_smoothing: float = 0.1
    clip_norm: float = 1.0  # 0 = no clipping (the paper does not clip; small batches benefit from it)
    max_steps: int = 0  # 0 = no limit
    max_epochs: int = 20
    time_budget_min: float = 0.0  # 0 = no limit; checked every step, all ranks stop together
    validate_every: int = 1000  # steps; 0 = at the end of every epoch. The run's last step is always validated
    log_every: int = 50  # steps between on_step calls
    patience: int = 5  # validations without a gain in `best_metric` before stopping; 0 = never stop early
    # What picks the best checkpoint, drives patience and decides whether the average is kept:
    # "bleu" (dev BLEU on `dev_limit` pairs of the set) or "loss" (dev NLL on every dev pair; fairseq's default
    # --best-checkpoint-metric). Loss is the steadier signal on a small greedy-decoded dev set.
    # NaN (a diverged run) never counts as better.
    best_metric: str = "bleu"
    seed: int = 0
    max_len: int = 256  # training pairs with a side longer than this (in tokens) are skipped
    dev_limit: int = 500  # dev pairs used for BLEU/chrF at validation, spread evenly over the set (0 = all)
    beam: int = 1  # validation decoding: 1 = greedy (fast), >1 = beam search
    len_penalty: float = 0.7  # GNMT alpha, §7 of Wu et al. 2016; the paper's 0.6 is for EN-DE (validation and test)
    max_len_a: float = 1.5  # decoding stops at a * src_len + b tokens (validation and the run's test decode)
    max_len_b: int = 10
    bf16: bool = True  # bf16 autocast on CUDA and on CPUs with native bf16 (mtcore.nmt.precision); fp32 elsewhere
    compile: bool = False  # torch.compile the training forward and backward (fuses the elementwise work; for GPUs)
    # Checkpoint averaging: the mean of the last `average_last` weight snapshots, `average_every` steps apart,
    # is validated at the end and kept when it beats the last weights on `best_metric` (0 or 1 = off)
    average_last: int = 0
    average_every: int = 100

    def __post_init__(self):
        for name in ("max_tokens", "accumulation", "warmup", "max_epochs", "log_every", "beam", "max_len", "average_every"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"`{name}` ({getattr(self, name)}) must be positive")
        for name in ("max_steps", "validate_every", "patience", "dev_limit", "max_len_b", "average_last", "seed"):
            if getattr(self, name) < 0:
                raise ConfigError(f"`{name}` ({getattr(self, name)}) must be >= 0")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ConfigError(f"`label_smoothing` ({self.label_smoothing}) must be in [0, 1)")
        for name in ("lr_scale", "max_len_a"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"`{name}` ({getattr(self, name)}) must be positive")
        for name in ("clip_norm", "time_budget_min", "len_penalty"):
            if getattr(self, name) < 0:
                raise ConfigError(f"`{name}` ({getattr(self, name)}) must be >= 0")
        if self.max_len > self.max_tokens:
            raise ConfigError(f"`max_len` ({self.max_len}) must not exceed `max_tokens` ({self.max_tokens})")
        if self.best_metric not in BEST_METRICS:
            raise ConfigError(f"`best_metric` ({self.best_metric!r}) must be one of {sorted(BEST_METRICS)}")

    def selection(self) -> tuple[str, str]:
        """(reported metric, "max" | "min") that `best_metric` names."""
        return BEST_METRICS[self.best_metric]

    def is_better(self, metrics: dict[str, float], than: dict[str, float]) -> bool:
        """Whether `metrics` beat `than` on `best_metric`."""
        key, order = self.selection()
        return metrics[key] > than[key] if order == "max" else metrics[key] < than[key]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        return _from_dict(cls, d, "train")

    def validation_decode(self) -> DecodeConfig:
        return DecodeConfig(beam=self.beam, len_penalty=self.len_penalty, max_len_a=self.max_len_a,
                            max_len_b=self.max_len_b, batch_size=64)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def with_overrides(self, overrides: list[str]) -> TrainConfig:
        return _apply_overrides(self, overrides, "train")


# --------------------------------------------------------------------------- decoding


@dataclass(frozen=True)
class Sampling:
    """Sampling instead of search (back-translation's `sample` mode, `translate --sample`)."""

    temperature: float = 1.0
    top_k: int = 0  # 0 = no top-k filter
    top_p: float = 1.0  # nucleus (Holtzman et al. 2020); 1.0 = no filter

    def __post_init__(self):
        if self.temperature <= 0:
            raise ConfigError(f"`temperature` ({self.temperature}) must be positive")
        if self.top_k < 0:
            raise ConfigError(f"`top_k` ({self.top_k}) must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"`top_p` ({self.top_p}) must be in (0, 1]")


@dataclass(frozen=True)
class DecodeConfig:
    """How a model decodes, in one place: test evaluation, `translate`, back-translation, validation
    during training and the MLflow pyfunc model all take one of these.

    `beam` 1 = greedy; `sampling` set = sampling (`beam` is then ignored)."""

    beam: int = 5
    len_penalty: float = 0.7  # GNMT alpha, §7 of Wu et al. 2016; the paper's 0.6 is for EN-DE
    max_len_a: float = 1.5  # output stops at a * source tokens + b
    max_len_b: int = 10
    batch_size: int = 32  # sentences per batch (sorted by length)
    n_best: int = 1  # hypotheses kept per source (<= beam)
    sampling: Sampling | None = None

    def __post_init__(self):
        for name in ("beam", "batch_size", "n_best"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ConfigError(f"`{name}` ({getattr(self, name)!r}) must be an integer >= 1")
        if self.max_len_a <= 0:
            raise ConfigError(f"`max_len_a` ({self.max_len_a}) must be positive")
        for name in ("len_penalty", "max_len_b"):
            if getattr(self, name) < 0:
                raise ConfigError(f"`{name}` ({getattr(self, name)}) must be >= 0")
        if self.n_best > self.beam or (self.n_best > 1 and self.sampling is not None):
            raise ConfigError(f"`n_best` ({self.n_best}) needs beam search with `beam` >= {self.n_best}")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DecodeConfig:
        d = dict(d)
        sampling = d.pop("sampling", None)
        cfg = _from_dict(cls, d, "decode")
        return cfg if sampling is None else dataclasses.replace(cfg, sampling=_from_dict(Sampling, sampling, "decode.sampling"))

    @classmethod
    def from_params(cls, params: dict[str, Any] | None) -> DecodeConfig:
        """From flat key/value params whose values may be strings (MLflow inference params, `key=value`)."""
        params = dict(params or {})
        _check_keys(cls, params, "decode")
        hints = typing.get_type_hints(cls)
        values = {k: parse_value(v, hints[k], f"decode.{k}") if isinstance(v, str) else v for k, v in params.items()}
        if "sampling" in values:
            raise ConfigError("`decode.sampling` cannot be given as a param; use beam search here")
        return _from_dict(cls, values, "decode")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> DecodeConfig:
        """A copy with some fields changed; unknown names are an error with a suggestion."""
        _check_keys(type(self), changes, "decode")
        return dataclasses.replace(self, **changes)


GREEDY = DecodeConfig(beam=1)


# --------------------------------------------------------------------------- a run = model + train


@dataclass(frozen=True)
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def check_positions(self) -> RunConfig:
        """A kept training pair has up to max_len tokens plus BOS/EOS; a shorter position table fails mid-training.
        (A training job checks it before it starts; a search lets such a trial fail and goes on.)"""
        if self.model.arch == "transformer" and self.model.max_positions < self.train.max_len + 2:
            raise ConfigError(f"`model.max_positions` {self.model.max_positions} is below `train.max_len` {self.train.max_len} + 2 "
                              "(the tokens of the longest kept pair and BOS/EOS); raise it or lower train.max_len")
        return self

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        _check_keys(cls, d, "")
        return cls(
            model=ModelConfig.from_dict(d.get("model", {})),
            train=TrainConfig.from_dict(d.get("train", {})),
        )

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model.to_dict(), "train": self.train.to_dict()}

    def with_overrides(self, overrides: list[str]) -> RunConfig:
        """`["model.heads=4", "train.warmup=2000"]`; values are parsed as YAML scalars."""
        by_section: dict[str, list[str]] = {"model": [], "train": []}
        for item in overrides:
            key = item.split("=", 1)[0].strip()
            section, _, rest = key.partition(".")
            if section not in by_section or not rest:
                close = difflib.get_close_matches(section, ["model", "train", "job", "search"], 1)
                hint = f"; did you mean `{close[0]}.{rest}`?" if close and close[0] != section and rest else ""
                raise ConfigError(f"override {item!r}: key must start with 'model.', 'train.' or 'job.' "
                                  f"(and 'search.' in a search){hint}")
            by_section[section].append(item.split(".", 1)[1])
        return dataclasses.replace(
            self,
            model=self.model.with_overrides(by_section["model"]),
            train=self.train.with_overrides(by_section["train"]),
        )


# --------------------------------------------------------------------------- strict loading


def _check_mapping(d: Any, section: str) -> None:
    if not isinstance(d, dict):
        where = f"`{section}` " if section else ""
        hint = f" (e.g. `{section}: {{preset: {d}}}`)" if section == "model" and isinstance(d, str) else ""
        raise ConfigError(f"{where}config must be a mapping of keys to values, got {type(d).__name__} {d!r}{hint}")


def _check_keys(cls, d: Any, section: str) -> None:
    where = f"`{section}` " if section else ""
    _check_mapping(d, section)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - known, key=str)
    if unknown:
        hints = [f"did you mean `{m[0]}`?" for k in unknown for m in [difflib.get_close_matches(str(k), known, 1)] if m]
        raise ConfigError(f"unknown {where}key(s) {unknown}; " + (" ".join(hints) or f"known keys: {sorted(known)}"))


def _coerce(value: Any, typ: Any, key: str) -> Any:
    """Check `value` against a field type; ints are accepted for floats, nothing else is converted,
    except YAML's booleans given to a string field: YAML 1.1 reads `yes`/`no`/`on`/`off` as booleans
    (the "Norway problem": `src_lang: no`), so they are read back as the words `yes`/`no`."""
    if value is None and type(None) in typing.get_args(typ):
        return None
    typ = _unoptional(typ)
    if typ is str and isinstance(value, bool):
        return "yes" if value else "no"
    if typ is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if typ is float and isinstance(value, str) and (number := yaml11_float(value)) is not None:
        return number
    if typ in (int, float) and isinstance(value, bool) or not isinstance(value, typ):
        raise ConfigError(f"`{key}` must be {typ.__name__}, got {type(value).__name__} {value!r}")
    if typ is float and not math.isfinite(value):  # YAML's .nan/.inf: a NaN budget never runs out
        raise ConfigError(f"`{key}` must be a finite number, got {value!r}")
    return value


_EXPONENT_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def yaml11_float(value: str) -> float | None:
    """`1e-3` as a number: YAML 1.1 (PyYAML) reads an exponent without a dot as a string; `1.0e-3` it reads
    as a float. A command-line override reads both as numbers; a job file should too."""
    return float(value) if _EXPONENT_NUMBER.fullmatch(value.strip()) else None


def _unoptional(typ: Any) -> Any:
    if typing.get_origin(typ) in (typing.Union, types.UnionType):
        return next(a for a in typing.get_args(typ) if a is not type(None))
    return typ


_TRUE, _FALSE = {"true", "yes", "on", "1"}, {"false", "no", "off", "0"}


def parse_value(raw: str, typ: Any, key: str) -> Any:
    """A command-line `key=value` string parsed to the type its field declares (never guessed from the text:
    `job.use_gpu=yes` stays the string "yes", `train.bf16=no` is False, `model.src_lang=no` is Norwegian)."""
    typ = _unoptional(typ)
    text = raw.strip()
    if typ is bool:
        if text.lower() in _TRUE | _FALSE:
            return text.lower() in _TRUE
        raise ConfigError(f"`{key}` must be a boolean (true/false, yes/no, 1/0), got {raw!r}")
    if typ in (int, float):
        try:
            value = typ(text) if typ is float else int(text)
        except ValueError:
            raise ConfigError(f"`{key}` must be {typ.__name__}, got {raw!r}") from None
        if not math.isfinite(value):
            raise ConfigError(f"`{key}` must be a finite number, got {raw!r}")
        return value
    return text


def _from_dict(cls, d: dict[str, Any], section: str):
    _check_keys(cls, d, section)
    hints = typing.get_type_hints(cls)
    return cls(**{k: _coerce(v, hints[k], f"{section}.{k}") for k, v in d.items()})


def _apply_overrides(cfg, overrides: list[str], section: str):
    """key=value pairs on one dataclass, each parsed to its field's type; `preset=NAME` (model only) first."""
    raw_values: dict[str, str] = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key=value")
        key, raw = (s.strip() for s in item.split("=", 1))
        raw_values[key] = raw
    current = cfg.to_dict()
    if "preset" in raw_values:
        if section != "model":
            raise ConfigError("`preset` is a model key")
        current = {**current, **PRESETS[_check_preset(raw_values.pop("preset"))]}
    _check_keys(type(cfg), raw_values, section)
    hints = typing.get_type_hints(type(cfg))
    values = {k: parse_value(v, hints[k], f"{section}.{k}") for k, v in raw_values.items()}
    return _from_dict(type(cfg), {**current, **values}, section)
