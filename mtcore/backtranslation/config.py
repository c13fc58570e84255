"""Settings of a back-translation run, validated before any work starts."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from pathlib import Path
from dataclasses import dataclass

from mtcore.config import PRESETS
from mtcore.errors import MtcoreError
from mtcore.data.paths import MONO_VI, RAW_PARALLEL
from mtcore.runs import home

MODES = ("beam", "sample", "noised")  # Edunov et al. 2018 compare exactly these three
# The align-filter scores that need nothing but the encoder (dual_xent needs two translation models).
# margin stays the default: the classifier catches more near misses but trains for ~13 CPU minutes on
# first use and is less precise on random misalignments (benchmarks/RESULTS.md, issue 21).
ALIGN_SCORES = ("margin", "cosine", "classifier")


# The setting behind each key of the reverse model's training job (mtcore.backtranslation.reverse): --reverse-vocab ...
REVERSE_KEYS = {"job.vocab_size": "reverse_vocab", "job.train_limit": "reverse_train_limit",
                "train.max_steps": "reverse_steps", "train.time_budget_min": "reverse_minutes"}


class BTError(MtcoreError, ValueError):
    """A back-translation run that cannot start; the message names the setting or file at fault."""


@dataclass(frozen=True)
class BTConfig:
    corpus: str = str(RAW_PARALLEL)  # raw parallel corpus (any format mtcore.data.corpus reads)
    mono: str = str(MONO_VI)  # monolingual Vietnamese: Parquet with a `text` column, or one sentence a line
    output: str = ""  # "": HOME/backtranslate, HOME read when the config is made (--home), not at import
    reverse_model: str = "train"  # a checkpoint directory, an MLflow model URI, or "train"
    # noised beam BT, untagged: the best mode measured by experiments/bt_effect.py at both parallel shares
    # (+0.01 at 10 %, +1.11 at 5 %; tagged beam −0.63; benchmarks/RESULTS.md, issue 17)
    mode: str = "noised"
    tag: bool = False  # prefix synthetic sources with <bt> (tagged BT, Caswell et al. 2019)
    ratio: float = 1.0  # at most ratio × real pairs synthetic pairs
    max_mono: int = 3000  # cap on monolingual sentences translated (0 = no cap): bounds CPU runs
    upsample: int = 1  # each real pair appears this many times in the augmented set
    beam: int = 5
    top_k: int = 10  # sampling mode: top-k 10, as in Edunov et al. 2018's "sampling" variants
    temperature: float = 1.0
    seed: int = 0
    clean_config: str | None = None  # cleaning rules YAML (default: mtcore's)
    align_score: str = "margin"  # one of ALIGN_SCORES
    encoder: str = "builtin"
    # The reverse model's budget, in steps: the same model whatever the machine's load. 1,500 steps of `mini` is the
    # reverse model of experiments/bt_effect.py, whose noised BT won there (dev BLEU 15.45 on a tenth of the corpus);
    # the 5-minute clock budget of before reached dev BLEU 7.06 on a quiet machine and 1.98–2.86 on a busy one, and
    # the synthetic filter then rejected two thirds to three quarters of its output (benchmarks/RESULTS.md).
    reverse_steps: int = 1500
    reverse_minutes: float = 5.0  # a clock budget instead, with reverse_steps = 0
    reverse_preset: str = "mini"  # on 2 CPUs a minutes-long budget buys ~10x more steps of `mini` than of `small`
    reverse_train_limit: int = 0  # first N aligned pairs for the reverse model (0 = all): tests
    reverse_vocab: int = 8000
    overwrite: bool = False
    # Another run's output directory: its finished stages whose settings equal this run's are used in
    # place (not copied), e.g. a tagged run takes an untagged run's reverse model and translations.
    reuse_from: str = ""

    def decode(self):
        """How the reverse model decodes: beam search, or top-k sampling in `sample` mode."""
        from mtcore.config import DecodeConfig, Sampling

        sampling = Sampling(temperature=self.temperature, top_k=self.top_k) if self.mode == "sample" else None
        return DecodeConfig(beam=self.beam, sampling=sampling)

    def __post_init__(self):
        if not self.output:
            object.__setattr__(self, "output", str(home() / "backtranslate"))
        if self.mode not in MODES:
            raise BTError(f"--mode must be one of {list(MODES)}, not {self.mode!r}")
        for name in ("ratio", "temperature", "reverse_minutes"):  # nan/inf pass the range checks and fail stages later
            if not math.isfinite(getattr(self, name)):
                raise BTError(f"`{name}` ({getattr(self, name)}) must be a finite number")
        if self.ratio <= 0:
            raise BTError(f"--ratio ({self.ratio}) must be positive")
        for name in ("max_mono", "reverse_train_limit", "reverse_steps", "seed"):  # seed: numpy's generators take none
            if getattr(self, name) < 0:
                raise BTError(f"--{name.replace('_', '-')} ({getattr(self, name)}) must be >= 0")
        for name in ("upsample", "beam", "top_k", "reverse_vocab"):
            if getattr(self, name) < 1:
                raise BTError(f"`{name}` ({getattr(self, name)}) must be >= 1")
        if self.temperature <= 0 or self.reverse_minutes <= 0:
            raise BTError("temperature and reverse_minutes must be positive")
        if self.align_score not in ALIGN_SCORES:
            raise BTError(f"--align-score must be one of {list(ALIGN_SCORES)}, not {self.align_score!r}")
        if self.reverse_preset not in PRESETS:  # known now, not after cleaning and alignment have run
            raise BTError(f"--reverse-preset: unknown preset {self.reverse_preset!r}; choose from {sorted(PRESETS)}")
        if self.reverse_model == "train":
            self._check_reverse_job()

    def _check_reverse_job(self) -> None:
        """The reverse model's training job as stage 3 builds it, now: its checks (`job.vocab_size` >= 16, ...) failed
        there, after cleaning and alignment, with a message naming `<dict>` and none of the flags that set them."""
        from mtcore.backtranslation.reverse import reverse_job
        from mtcore.config import ConfigError

        try:
            reverse_job(self, Path(self.output) / "aligned", run_name="bt-reverse-check").run.check_positions()
        except ConfigError as err:
            message = str(err).removeprefix("<dict>: ")
            names = [name for key, name in REVERSE_KEYS.items() if key in message] or ["reverse_preset"]
            flags = ", ".join(f"--{name.replace('_', '-')} {getattr(self, name)}" for name in names)
            raise BTError(f"{flags}: the reverse model's {message}") from None

    def stage_settings(self, reverse_dir: str | Path | None = None) -> dict[str, dict]:
        """What each stage's output depends on (its own settings plus everything upstream). `reverse_dir`: the
        local checkpoint a given `reverse_model` resolved to (an MLflow URI is downloaded first)."""
        from mtcore.runs import code_version, content_hash

        d = dataclasses.asdict(self)
        # Inputs count by their contents, not their paths: a file cut in place is another input, and the
        # same file at another path (a moved or second checkout's embedded data) is the same one.
        for key in ("corpus", "mono", "reverse_model"):
            if key == "reverse_model" and d[key] == "train":  # the word, not a folder ./train of the working directory
                continue
            if d.get(key) and "://" not in str(d[key]) and not str(d[key]).startswith(("runs:/", "models:/")) \
                    and (Path(d[key]).exists() or key == "corpus"):
                d[key] = {"content": content_hash(d[key])}
        # A model URI counts by what it resolved to: `models:/NAME/latest` is another model once a new
        # version is registered, though its string is the same.
        if reverse_dir is not None and self.reverse_model != "train":
            d["reverse_model"] = {"content": content_hash(reverse_dir)}
        # The encoder too (the built-in one of this workspace, or a directory): retrained in place, it is
        # another filter; so is its pair classifier, with --align-score classifier.
        from mtcore.embedding import BUILTIN, builtin_dir

        encoder = builtin_dir() if self.encoder == BUILTIN else Path(self.encoder)
        if encoder.is_dir():
            from mtcore.alignment.classifier import classifier_dir

            d["encoder"] = {"content": content_hash(encoder)}
            if self.align_score == "classifier" and classifier_dir(encoder).is_dir():
                d["classifier"] = {"content": content_hash(classifier_dir(encoder))}
        # The held-out sets the cleaning's TestOverlap reads (data/dev + data/test unless the rules say
        # otherwise): an edited test set is another cleaned corpus, as for pipelines/clean.py.
        from mtcore.cleaning import load_config
        from mtcore.alignment.filter import ALIGNMENT_CODE
        from mtcore.cleaning.pipeline import CLEANING_CODE, stage_settings as cleaning_settings

        rules, heldout = cleaning_settings(load_config(self.clean_config))
        # The rules as read, not the file's bytes: a copy of the default rules, or the same rules respelled,
        # is the same stage (pipelines/clean.py reuses them; this job refused them and redid all 7 stages).
        d["clean_config"] = None if rules == cleaning_settings(load_config(None))[0] else {"rules": rules}
        d["heldout"] = {name: content_hash(path) if path.exists() else "missing" for name, path in heldout.items()}
        pick = lambda *keys: {k: d[k] for k in keys}  # noqa: E731
        # ... and the code that makes them: a changed rule or decoder is another output, as for pipelines/clean.py.
        code = lambda key, *modules: {f"code:{key}": code_version(*modules)}  # noqa: E731
        clean = pick("corpus", "clean_config", "heldout") | code("clean", *CLEANING_CODE)
        align = clean | pick("align_score", "encoder") | {"classifier": d.get("classifier")} | code("align", *ALIGNMENT_CODE)
        # Only the settings the reverse model is made with: none of the training ones for a model given, and no
        # minutes beside a step count (each such change redid the back-translation for an identical model)
        training = ("reverse_minutes", "reverse_steps", "reverse_preset", "reverse_train_limit", "reverse_vocab", "seed")
        if self.reverse_model != "train":
            training = ()
        elif self.reverse_steps:
            training = tuple(k for k in training if k != "reverse_minutes")
        reverse = align | pick("reverse_model", *training) | code(
            "reverse", "mtcore.nmt", "mtcore.config", "mtcore.distributed", "mtcore.backtranslation.reverse")
        select = align | pick("mono", "ratio", "max_mono", "seed") | code("select", "mtcore.backtranslation.select")
        translate = reverse | select | pick("mode", "beam", "top_k", "temperature") | code(
            "translate", "mtcore.backtranslation.translate")
        synthetic = translate | pick("tag") | code("synthetic", "mtcore.backtranslation.pipeline")  # rules: clean_config's
        assemble = synthetic | pick("upsample")
        return {"clean": clean, "align_filter": align, "reverse_model": reverse, "select_mono": select,
                "backtranslate": translate, "synthetic_filter": synthetic, "assemble": assemble}


def settings_hash(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]
