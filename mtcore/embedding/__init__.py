"""Sentence encoders: the built-in dual encoder (trained by the platform) and external ones.

`load_encoder(spec)` is the one entry point the alignment code uses:

- `"builtin"`: the encoder trained on the embedded corpus, cached under
  `runs/encoders/builtin/` (or `$MTCORE_HOME/encoders/builtin`); trained on first
  use (a few CPU minutes) so that a user's first command just works.
- a directory written by `pipelines/train_encoder.py`: that encoder.
- anything else (a name such as `sentence-transformers/LaBSE`, or a directory of a
  saved sentence-transformers model): loaded with sentence-transformers, offline only.
"""

from __future__ import annotations

import fcntl
import logging
from pathlib import Path

from mtcore.embedding.encoder import (CONFIG_FILE, REFERENCE_FILE, SPM_FILE, WEIGHTS_FILE, EncoderConfig, EncoderError, SentenceEncoder,
                                     encoder_config, is_encoder_dir, load_builtin)
from mtcore.embedding.external import EncoderNotAvailable, SentenceTransformerEncoder, how_to_get

log = logging.getLogger(__name__)
BUILTIN = "builtin"

__all__ = [
    "BUILTIN",
    "EncoderConfig",
    "EncoderError",
    "EncoderNotAvailable",
    "SentenceEncoder",
    "SentenceTransformerEncoder",
    "builtin_dir",
    "ensure_builtin",
    "load_encoder",
    "resolve_encoder",
]


def builtin_dir() -> Path:
    from mtcore.runs import home

    return home() / "encoders" / BUILTIN


def ensure_builtin() -> Path:
    """The built-in encoder's directory, training it on the embedded corpus if it is not there yet.

    The held-out sets' sentences (`mtcore.data.corpus.heldout_texts`) are excluded from its training data, so
    that benchmarks on them measure held-out accuracy.
    """
    path = builtin_dir()
    if _complete(path):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / ".builtin.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two first commands at once: one trains, the other waits for it
        if not _complete(path):
            from mtcore.data.paths import RAW_PARALLEL

            if is_encoder_dir(path) and not RAW_PARALLEL.exists():  # cannot retrain: the old one still works
                log.warning("the built-in encoder in %s has no reference pairs and %s is missing to train it again: the "
                            "filter calibrates on near misses", path, RAW_PARALLEL)
                return path
            if is_encoder_dir(path):
                log.warning("the built-in encoder in %s predates its held-out reference pairs (the filter's calibration): "
                            "training it again", path)
            _train_builtin(path)
    return path


def _complete(path: Path) -> bool:
    """A built-in encoder with its reference pairs (encoders trained before they existed are retrained once)."""
    return is_encoder_dir(path) and (path / REFERENCE_FILE).is_file()


def _train_builtin(path: Path) -> None:
    from mtcore.console import progress_line
    from mtcore.data.corpus import heldout_texts
    from mtcore.embedding.train import train_encoder
    from mtcore.data.paths import RAW_PARALLEL

    if not RAW_PARALLEL.exists():
        raise EncoderError(
            f"the built-in encoder is trained on the embedded corpus, but {RAW_PARALLEL} does not exist; "
            f"train one on your own corpus with `python pipelines/train_encoder.py --corpus PATH --output DIR` "
            f"and pass `--encoder DIR`"
        )
    exclude = heldout_texts()
    log.warning("training the built-in sentence encoder on %s (first use; a few CPU minutes)", RAW_PARALLEL)
    trained = train_encoder(RAW_PARALLEL, path, exclude_texts=exclude, run_name="encoder-builtin")
    m = trained.metrics
    progress_line(f"encoder: trained in {m['train_seconds']:.0f} s, retrieval P@1 {m['p_at_1']:.3f} on "
                  f"{m['heldout_pairs']:,} held-out pairs → {path}")


def resolve_encoder(spec: str) -> str:
    """What `spec` will load, as a string fit for passing to Ray actors (which then call `load_encoder`)."""
    if spec == BUILTIN:
        return str(ensure_builtin())
    return spec


def _refuse_non_directory(spec: str, path: Path) -> None:
    """A file, or a path (not a model name such as org/name) that does not exist, is no encoder."""
    if path.exists():
        raise EncoderError(f"{spec}: an encoder is a directory (or 'builtin', or a sentence-transformers model name)")
    if spec.startswith(("/", ".", "~")):
        raise EncoderError(f"{spec}: encoder directory not found")


def check_encoder(spec: str) -> None:
    """Refuse now, on the driver, what `load_encoder(spec)` would refuse inside a Ray actor (where the error
    would come back as a wall of actor-death tracebacks); no weights are loaded."""
    import importlib.util

    if spec == BUILTIN:
        return
    path = Path(spec).expanduser()
    if path.is_dir():
        if is_encoder_dir(path):
            encoder_config(path)  # a translation checkpoint or a foreign config.json: named here
            load_builtin(path)  # damaged weights or pieces too (a small model: about a second)
            return
        if not (path / "modules.json").is_file():  # what every sentence-transformers model directory holds
            raise EncoderError(f"{spec}: neither an mtcore encoder ({CONFIG_FILE}, {WEIGHTS_FILE}, {SPM_FILE}) nor a "
                               "sentence-transformers model directory (modules.json)")
    else:
        _refuse_non_directory(spec, path)
    if importlib.util.find_spec("sentence_transformers") is None:
        missing = "" if path.exists() else f"there is no directory {path.absolute()}, and as a model name, "
        raise EncoderNotAvailable(f"encoder '{spec}': {missing}it needs the sentence-transformers package, which is "
                                  "not installed. " + how_to_get(spec))
    if not path.is_dir():  # a model name: it must be in the local Hugging Face cache (nothing is downloaded)
        from huggingface_hub import try_to_load_from_cache

        if not isinstance(try_to_load_from_cache(spec, "modules.json"), str):
            raise EncoderNotAvailable(f"encoder '{spec}' is not available offline (not a local directory, not in the "
                                      "Hugging Face cache). " + how_to_get(spec))


def load_encoder(spec: str = BUILTIN, device: str = "cpu"):
    """An object with `encode(texts) -> (N, dim) float32 unit rows`, `dim` and `name`."""
    if spec == BUILTIN:
        return load_builtin(ensure_builtin(), device)
    if is_encoder_dir(spec):
        return load_builtin(spec, device)
    path = Path(spec).expanduser()
    if not path.is_dir():
        _refuse_non_directory(spec, path)
    return SentenceTransformerEncoder(spec, device=None if device == "cpu" else device)
