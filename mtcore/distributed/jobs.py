"""Run-level settings of a training job, kept apart from the model/training hyperparameters.

A job file (`experiments/configs/NAME.yaml`; the default: default_job.yaml here) has three sections: `job` (this
module: data, workers, run name, tracking), `model` and `train`
(`mtcore.config`). `key=value` overrides address any of them:
`job.workers=1 model.heads=4 train.warmup=2000`; `model.arch=rnn` trains the attention
RNN encoder-decoder instead of the Transformer (`mtcore.nmt.rnn`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from mtcore.config import (AUTO, PRESETS, ConfigError, RunConfig, _apply_overrides, _check_mapping, _from_dict, auto_settings,
                           load_yaml, parse_value, yaml11_float)
from mtcore.data.paths import DEV, TEST, same_file
from mtcore.hardware import cpu_trains_in_bf16

# The job `train_transformer.py` / `mtcore train` runs without --config; package data, so a wheel has it.
DEFAULT_JOB = Path(__file__).with_name("default_job.yaml")


def apply_early_overrides(data: dict, overrides: list[str]) -> tuple[dict, list[str]]:
    """A preset, a budget or a precision given on the command line must be known before `auto` is resolved:
    (the file's sections with them applied, the other overrides)."""
    data = dict(data)
    early = [o for o in overrides if o.split("=", 1)[0].strip() in ("model.preset", "train.time_budget_min", "train.bf16")]
    for item in early:
        key, _, raw = item.partition("=")
        section, name = key.strip().split(".")
        typ = {"preset": str, "time_budget_min": float, "bf16": bool}[name]
        value = raw.strip() if typ is str else parse_value(raw, typ, key.strip())
        # Checked here, so that an error names the override, not the job file it was applied to.
        if name == "preset" and value != AUTO and value not in PRESETS:
            raise ConfigError(f"override {item!r}: unknown model preset {value!r}; choose from {[AUTO, *sorted(PRESETS)]}")
        if name == "time_budget_min" and not value >= 0:
            raise ConfigError(f"override {item!r}: time_budget_min must be >= 0 (0 = no limit)")
        current = data.get(section)
        _check_mapping({} if current is None else current, section)
        data[section] = {**(current or {}), name: value}
    return data, [o for o in overrides if o not in early]


@dataclass(frozen=True)
class JobConfig:
    run_name: str = ""  # "" = derived from the settings, so that a rerun resumes the same run
    experiment: str = "train_transformer"  # one MLflow experiment per entry point
    train_data: str = ""  # "" = the embedded corpus after the cleaning stage (cleaned on first use)
    dev_data: str = str(DEV)
    test_data: str = str(TEST)
    # Languages of the corpora's src/tgt columns, "de-en"; "" = en-vi for an en/vi model, else the model's direction.
    corpus_langs: str = ""
    train_limit: int = 0  # use only the first N training pairs (0 = all): quick runs and tests
    vocab_size: int = 8000  # joint SentencePiece vocabulary, trained once per corpus before workers start
    # Share of characters the vocabulary must hold as pieces; the rarest rest fall back to bytes. 1.0 suits alphabets
    # (every Vietnamese letter a piece); Chinese or Japanese corpora need 0.9995 (SentencePiece's CJK advice), or a
    # piece per Han character overflows the vocabulary
    character_coverage: float = 1.0
    workers: int = 0  # 0 = every GPU of the cluster, else 2 CPU workers (never more than the CPUs)
    use_gpu: str = "auto"  # auto | yes | no
    max_failures: int = 2  # a dead worker is replaced and training resumes from the last checkpoint
    test_limit: int = 0  # test pairs decoded at the end, spread evenly over the set (0 = all)
    test_beam: int = 5
    log_model: bool = True  # the best checkpoint as an MLflow pyfunc model
    fail_at_step: int = 0  # testing fault tolerance: rank `fail_rank` raises once at this step
    fail_rank: int = 1

    def __post_init__(self):
        for name in ("train_data", "dev_data", "test_data"):  # `~/corpus.tsv` in a job file: the shell did not expand it
            if str(getattr(self, name)).startswith("~"):
                object.__setattr__(self, name, os.path.expanduser(getattr(self, name)))
        if self.use_gpu not in ("auto", "yes", "no"):
            raise ConfigError(f"`job.use_gpu` must be auto, yes or no, not {self.use_gpu!r}")
        for name in ("train_limit", "workers", "max_failures", "test_limit", "fail_at_step"):
            if getattr(self, name) < 0:
                raise ConfigError(f"`job.{name}` ({getattr(self, name)}) must be >= 0")
        if not 0.98 <= self.character_coverage <= 1.0:
            raise ConfigError(f"`job.character_coverage` ({self.character_coverage}) must be in [0.98, 1] (0.9995 for CJK)")
        if self.vocab_size < 16:
            raise ConfigError(f"`job.vocab_size` ({self.vocab_size}) must be >= 16 (the tokenizer's size)")
        if self.run_name and not re.fullmatch(r"[\w.+-]+", self.run_name) or self.run_name in (".", ".."):
            raise ConfigError(f"`job.run_name` {self.run_name!r}: a run name is one folder name (letters, digits, "
                              "_ . + -); runs are kept under runs/ray_train/NAME")
        if self.test_beam < 1:
            raise ConfigError(f"`job.test_beam` ({self.test_beam}) must be >= 1")
        if self.corpus_langs:  # as --langs takes them: de-en, en-zh_CN
            from mtcore import checks

            try:
                checks.language_pair(self.corpus_langs, "`job.corpus_langs`")
            except checks.UsageError as err:
                raise ConfigError(str(err)) from None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class TrainingJob:
    job: JobConfig = field(default_factory=JobConfig)
    run: RunConfig = field(default_factory=RunConfig)

    # Why `preset: auto` chose what it chose (empty for explicit presets); not part of the settings.
    preset_note: str = field(default="", compare=False)

    def check_languages(self) -> "TrainingJob":
        """The model's languages are the corpus's, and a pair other than en-vi brings its own data."""
        from mtcore.nmt.training import EMBEDDED_LANGS, corpus_languages

        langs = corpus_languages(self.run.model, self.job.corpus_langs)
        model = {self.run.model.src_lang, self.run.model.tgt_lang}  # lower-case, as ModelConfig keeps them
        if model != set(langs):
            raise ConfigError(f"model {self.run.model.direction} and corpus languages {'-'.join(langs)} differ; set "
                              "model.src_lang/tgt_lang or job.corpus_langs")
        if set(langs) != set(EMBEDDED_LANGS):  # the embedded corpora are English-Vietnamese
            embedded = [key for key, value, default in (("job.train_data", self.job.train_data, ""),
                                                        ("job.dev_data", self.job.dev_data, str(DEV)),
                                                        ("job.test_data", self.job.test_data, str(TEST)))
                        if value == default or same_file(value, default)]
            if embedded:
                raise ConfigError(f"{', '.join(embedded)}: the embedded corpora are English-Vietnamese; give "
                                  f"{'-'.join(langs)} data for {self.run.model.direction} (--data, job.dev_data=, job.test_data=)")
        return self

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "<dict>", gpus: int = 0) -> "TrainingJob":
        """`model.preset: auto` is resolved here for `gpus` GPUs (0: CPU workers) and the job's time budget."""
        if not isinstance(d, dict):
            raise ConfigError(f"{source}: a job file must be a mapping with job/model/train sections")
        unknown = sorted(set(d) - {"job", "model", "train"})
        if unknown:
            raise ConfigError(f"{source}: unknown section(s) {unknown}; expected job, model, train")
        try:
            section = {name: {} if d.get(name) is None else d[name] for name in ("job", "model", "train")}  # `job:` alone is empty
            for name, body in section.items():
                _check_mapping(body, name)  # `job: []`, `model: 0`: an error, not an empty section
            sections, note = _resolve_auto({k: section[k] for k in ("model", "train")}, gpus)
            return cls(job=_from_dict(JobConfig, section["job"], "job"), run=RunConfig.from_dict(sections),
                       preset_note=note)
        except ConfigError as err:
            raise ConfigError(f"{source}: {err}") from None

    @classmethod
    def load(cls, path: str | Path | None, overrides: list[str] = (), gpus: int = 0) -> "TrainingJob":
        data: dict = {}
        if path is not None:
            path = Path(path)
            if not path.is_file():
                raise ConfigError(f"{path}: config file not found")
            data = load_yaml(path)
            if not isinstance(data, dict):
                raise ConfigError(f"{path}: a job file must be a mapping with job/model/train sections")
        data, rest = apply_early_overrides(data, overrides)
        job = cls.from_dict(data, str(path or "<defaults>"), gpus).with_overrides(rest).check_languages()
        job.run.check_positions()
        if job.run.model.vocab_size and job.run.model.vocab_size != job.job.vocab_size:  # workers failed on it, retried
            raise ConfigError(f"{path or '<defaults>'}: `model.vocab_size` ({job.run.model.vocab_size}) is the "
                              f"tokenizer's, which `job.vocab_size` ({job.job.vocab_size}) sizes: set that one")
        return job

    def with_overrides(self, overrides: list[str]) -> "TrainingJob":
        for item in overrides:
            if "=" not in item:
                raise ConfigError(f"override {item!r} must look like key=value (e.g. train.warmup=2000)")
        job_items = [o.split(".", 1)[1] for o in overrides if o.startswith("job.")]
        run_items = [o for o in overrides if not o.startswith("job.")]
        run = self.run.with_overrides(run_items)
        return TrainingJob(job=_apply_overrides(self.job, job_items, "job"), run=run,
                           preset_note=_note_overrides(self.preset_note, self.run, run))

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.job.to_dict(), **self.run.to_dict()}


    # The job keys that change what is trained (the training data count by content once resolved, apart from these)
    TRAINED_JOB_KEYS = ("train_limit", "vocab_size", "character_coverage", "corpus_langs", "workers", "use_gpu")

    def fingerprint(self, data_version: str = "") -> str:
        """Hash of everything that changes what is trained (not where it is logged or tested). `data_version`
        (the training corpus's content hash, once resolved) makes the same path with other contents another run."""
        job = self.job.to_dict()
        keep = {k: v for k, v in job.items() if k in ("train_data", "train_limit", "vocab_size")}
        if job.get("character_coverage", 1.0) != 1.0:  # another tokenizer; the default leaves older fingerprints as they were
            keep["character_coverage"] = job["character_coverage"]
        # Which column is the source, and the workers that make a step's batch, change what is trained; counted when
        # set, so that the runs of the defaults keep their names (and resume).
        defaults = JobConfig().to_dict()
        keep |= {k: job[k] for k in ("corpus_langs", "workers", "use_gpu") if job[k] != defaults[k]}
        data = {}
        if data_version:
            # At run time the data count by their contents, not their paths (another output folder with the
            # same pairs is the same run); the dev set picks the best checkpoint, so it counts too.
            from mtcore.runs import content_hash, input_files

            keep.pop("train_data")
            dev = Path(self.job.dev_data)  # a file, a folder or a Moses prefix
            data = {"data": data_version, "dev": content_hash(dev) if input_files(dev) else str(dev)}
        body = json.dumps({"job": keep, **self.run.to_dict()} | data, sort_keys=True)
        return hashlib.sha256(body.encode()).hexdigest()[:12]

    def run_name(self, data_version: str = "") -> str:
        """What the run is: architecture, shape, the searched knobs and direction, and a hash of the settings
        and data (`fingerprint`); stable for resume."""
        if self.job.run_name:
            return self.job.run_name
        m, t = self.run.model, self.run.train
        if m.arch == "rnn":  # cell, attention and hidden size, where the Transformer has heads
            shape = f"rnn-{m.rnn_cell}-{m.rnn_attention}-d{m.d_model}-H{m.rnn_hidden or m.d_model}-L{m.layers}"
        else:
            shape = f"{m.arch}-d{m.d_model}-L{m.layers}-h{m.heads}"
        return f"{shape}-w{t.warmup}-ls{t.label_smoothing:g}-{m.direction}-{self.fingerprint(data_version)[:6]}"


# The training keys `auto` chooses with the model (the rest are the job's whatever the preset)
AUTO_TRAIN_KEYS = ("max_tokens", "accumulation", "lr_scale", "warmup")


def _note_overrides(note: str, before: RunConfig, after: RunConfig) -> str:
    """`auto`'s note, saying which of its choices command-line overrides replaced: it claimed "mini, the best for
    the budget" beside a 256d × 6-layer model."""
    if not note:
        return note
    old, new = before.to_dict(), after.to_dict()
    changed = [f"model.{k}" for k, v in new["model"].items() if old["model"].get(k) != v]
    changed += [f"train.{k}" for k in AUTO_TRAIN_KEYS if old["train"].get(k) != new["train"].get(k)]
    return note + (f"; the job overrides {', '.join(changed)}, so what trains is not that measured choice" if changed else "")


def _resolve_auto(sections: dict[str, dict], gpus: int) -> tuple[dict[str, dict], str]:
    """`model.preset: auto` → the measured choice for the budget and hardware, under the job's explicit keys."""
    model, train = dict(sections["model"]), dict(sections["train"])
    if model.get("preset") != AUTO:
        return {"model": model, "train": train}, ""
    model.pop("preset")
    budget = train.get("time_budget_min", 0.0)
    if isinstance(budget, str) and yaml11_float(budget) is not None:  # `time_budget_min: 1e1`
        budget = train["time_budget_min"] = yaml11_float(budget)
    if isinstance(budget, bool) or not isinstance(budget, (int, float)):
        raise ConfigError(f"`train.time_budget_min` must be float, got {budget!r}")
    cpu_bf16 = not gpus and cpu_trains_in_bf16(train.get("bf16", True) is not False)
    auto_model, auto_train, why = auto_settings(float(budget), gpus, cpu_bf16)
    # The note names what auto chose; keys the job file sets itself are another model, which the note must not claim
    changed = [f"{section}.{k}" for section, mine, chosen in (("model", model, auto_model), ("train", train, auto_train))
               for k in mine if k in chosen and mine[k] != chosen[k]]
    if changed:
        why += f"; the job overrides {', '.join(changed)}, so what trains is not that measured choice"
    return {"model": {**auto_model, **model}, "train": {**auto_train, **train}}, why
