"""Checkpoints: one directory is enough to translate.

    DIR/model.pt        weights (a state dict; loaded with weights_only=True)
    DIR/config.json     resolved ModelConfig (direction included), TrainConfig, step, metrics,
                        and the SentencePiece model's sha256 + vocab size
    DIR/spm.model       the SentencePiece model, copied in
    DIR/train_state.pt  optional: optimizer, scheduler, step, epoch, best BLEU (to resume)

config.json is also the manifest: the sha256 of every other file (`files`). A directory is
written next to its place and renamed into it, so a crash leaves the old one or the new
one, never half of each; a file damaged later (a full disk, a bad copy) fails its checksum.

Loading refuses a mismatch with a message naming it: a SentencePiece model that is not
the one the weights were trained with, a vocabulary of another size, a weight of
another shape (the parameter is named), a damaged file, a directory of another kind.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mtcore.nmt.averaging import distinct_checkpoints, mean_state
from mtcore.errors import MtcoreError
from mtcore import __version__
from mtcore.config import ModelConfig, TrainConfig
from mtcore.nmt.model import Seq2Seq, build_model
from mtcore.nmt.tokenizer import Tokenizer

WEIGHTS, CONFIG, SPM, TRAIN_STATE = "model.pt", "config.json", "spm.model", "train_state.pt"

log = logging.getLogger(__name__)


class CheckpointError(MtcoreError, ValueError):
    """A checkpoint that cannot be used as asked; the message names the file or parameter at fault."""


def unwrap(model: torch.nn.Module) -> Seq2Seq:
    """The bare model under DistributedDataParallel / torch.compile wrappers."""
    while hasattr(model, "module") or hasattr(model, "_orig_mod"):
        model = getattr(model, "module", None) or model._orig_mod
    return model


def tokenizer_fingerprint(tokenizer: Tokenizer) -> dict[str, Any]:
    return {"file": SPM, "sha256": hashlib.sha256(tokenizer.model_bytes()).hexdigest(), "vocab_size": tokenizer.vocab_size}


@dataclass
class Checkpoint:
    path: Path
    model: Seq2Seq
    model_cfg: ModelConfig
    tokenizer: Tokenizer
    train_cfg: TrainConfig | None
    meta: dict[str, Any]  # the whole config.json


def save_checkpoint(
    directory: str | Path,
    model: torch.nn.Module,
    tokenizer: Tokenizer,
    *,
    train_cfg: TrainConfig | None = None,
    train_state: dict[str, Any] | None = None,
    step: int | None = None,
    metrics: dict[str, Any] | None = None,
) -> Path:
    """Write atomically (a sibling temp directory renamed into place), replacing `directory`."""
    directory = Path(directory)
    model = unwrap(model)
    fp = tokenizer_fingerprint(tokenizer)
    if fp["vocab_size"] != model.cfg.vocab_size:
        raise CheckpointError(f"tokenizer has {fp['vocab_size']} pieces but the model's vocab_size is {model.cfg.vocab_size}")
    meta = {
        "model": model.cfg.to_dict(),
        "train": train_cfg.to_dict() if train_cfg else None,
        "tokenizer": fp,
        "step": step,
        "metrics": metrics or {},
        "mtcore_version": __version__,
    }
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, tmp / WEIGHTS)
    (tmp / CONFIG).write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    shutil.copyfile(tokenizer.path, tmp / SPM)
    if train_state is not None:
        torch.save(train_state, tmp / TRAIN_STATE)
    meta["files"] = {f.name: file_sha256(f) for f in sorted(tmp.iterdir()) if f.name != CONFIG}  # the manifest
    (tmp / CONFIG).write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    old = directory.with_name(f".{directory.name}.old")
    shutil.rmtree(old, ignore_errors=True)  # left by a crash between the two renames below
    if directory.exists():
        os.replace(directory, old)  # renames only: `directory` is always whole, old or new
    os.replace(tmp, directory)
    shutil.rmtree(old, ignore_errors=True)
    return directory


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify(directory: Path, meta: dict[str, Any], names: Sequence[str]) -> None:
    """Files against the manifest's checksums (checkpoints older than the manifest are not checked)."""
    for name in names:
        expected = meta.get("files", {}).get(name)
        if expected and (directory / name).is_file() and file_sha256(directory / name) != expected:
            raise CheckpointError(f"{directory / name}: damaged (its sha256 differs from the one in {CONFIG}); "
                                  "use an earlier checkpoint or train again")


def torch_load(path: Path) -> Any:
    """`torch.load(weights_only=True)`; a truncated or foreign file is a CheckpointError naming it."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - random bytes reach torch's unpickler as any exception (IndexError, KeyError, ...)
        first = " ".join(str(err).split())[:100]
        raise CheckpointError(f"{path}: damaged or not a PyTorch file mtcore wrote ({first}); "
                              "use an earlier checkpoint or train again") from None


def read_meta(directory: str | Path) -> dict[str, Any]:
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: no such checkpoint directory; pass a directory with {CONFIG}, {WEIGHTS}, {SPM}")
    for name in (CONFIG, WEIGHTS, SPM):
        if not (directory / name).is_file():
            raise CheckpointError(f"{directory}: not a checkpoint directory (missing {name}); "
                                  f"pass a training run's checkpoint directory")
    try:
        meta = json.loads((directory / CONFIG).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{directory / CONFIG}: damaged, not JSON ({err}); use an earlier checkpoint or train again") from None
    if not isinstance(meta, dict) or "model" not in meta or "tokenizer" not in meta:
        raise CheckpointError(f"{directory}: {_kind(meta)}, not a translation checkpoint; "
                              "pass a checkpoint of experiments/train_transformer.py")
    return meta


def _kind(meta: Any) -> str:
    """What a directory with config.json + model.pt + spm.model is when it is not a checkpoint."""
    if isinstance(meta, dict) and {"dim", "max_len", "d_model"} <= set(meta):  # mtcore.embedding's EncoderConfig
        return "a sentence-encoder directory (pipelines/train_encoder.py)"
    return f"an unknown directory ({CONFIG} has no `model`/`tokenizer` sections)"


def check_tokenizer(meta: dict[str, Any], tokenizer: Tokenizer, where: str) -> None:
    """The tokenizer must be byte-identical to the one recorded at save time."""
    expected, actual = meta["tokenizer"], tokenizer_fingerprint(tokenizer)
    if actual["sha256"] != expected["sha256"]:
        raise CheckpointError(
            f"{where}: SentencePiece model {tokenizer.path} (sha256 {actual['sha256'][:12]}, {actual['vocab_size']} pieces) "
            f"is not the one this checkpoint was trained with (sha256 {expected['sha256'][:12]}, "
            f"{expected['vocab_size']} pieces)"
        )


def load_weights(model: torch.nn.Module, state: dict[str, torch.Tensor], where: str = "checkpoint") -> None:
    """`load_state_dict(strict=True)` with messages naming the parameter and both shapes."""
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    if missing or unexpected:
        raise CheckpointError(f"{where}: parameters missing {missing[:5]}, unexpected {unexpected[:5]} (another architecture?)")
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(own[name].shape):
            raise CheckpointError(
                f"{where}: parameter `{name}` has shape {tuple(tensor.shape)} in the checkpoint but "
                f"{tuple(own[name].shape)} in the model (different vocabulary or config)"
            )
    model.load_state_dict(state)


def checkpoint_dir(spec: str | Path, resolve: Callable[[str], Path] | None = None) -> Path:
    """A `--model` argument as a checkpoint directory: the directory itself; a training run's directory → its
    `best/` (the stable path the run prints); `runs:/RUN_ID[/PATH]` or `models:/NAME/VERSION` → `resolve(spec)`
    (the entry points pass the tracking layer's download). Anything else is returned for `load_checkpoint` to refuse
    with its own message."""
    text = str(spec)
    if text.startswith(("runs:/", "models:/")):
        if resolve is None:
            raise CheckpointError(f"{text}: an MLflow reference; use `python -m mtcore.translate|evaluate|export`, which "
                                  "download it, or pass a checkpoint directory")
        return resolve(text)
    path = Path(spec)
    if path.is_dir() and not (path / CONFIG).is_file() and (path / "best" / CONFIG).is_file():
        log.info("%s is a training run: using its best checkpoint, %s", path, path / "best")
        return path / "best"
    return path


def load_checkpoint(
    directory: str | Path, *, device: str | torch.device = "cpu", tokenizer: Tokenizer | None = None
) -> Checkpoint:
    """Model (eval mode, on `device`), its config and its tokenizer. Pass `tokenizer` to insist
    that the checkpoint was trained with that exact SentencePiece model."""
    directory = Path(directory)
    meta = read_meta(directory)
    verify(directory, meta, [SPM])
    own_tok = Tokenizer(directory / SPM)
    check_tokenizer(meta, own_tok, f"{directory / SPM}")
    if tokenizer is not None:
        check_tokenizer(meta, tokenizer, str(directory))
    model_cfg = _config(ModelConfig, meta, "model", directory)
    if model_cfg.vocab_size != own_tok.vocab_size:
        raise CheckpointError(
            f"{directory}: config vocab_size {model_cfg.vocab_size} but {SPM} has {own_tok.vocab_size} pieces"
        )
    model = build_model(model_cfg)
    verify(directory, meta, [WEIGHTS])
    load_weights(model, torch_load(directory / WEIGHTS), str(directory / WEIGHTS))
    model.to(device).eval()
    train_cfg = _config(TrainConfig, meta, "train", directory) if meta.get("train") else None
    return Checkpoint(directory, model, model_cfg, own_tok, train_cfg, meta)


def _config(cls, meta: dict, section: str, directory: Path):
    """A section of config.json; an error names the file and, when it differs, the version that wrote it."""
    from mtcore.config import ConfigError

    try:
        return cls.from_dict(meta[section])
    except ConfigError as err:
        written = meta.get("mtcore_version")
        version = f" (written by mtcore {written}; this is {__version__})" if written and written != __version__ else ""
        raise CheckpointError(f"{directory / 'config.json'}: {err}{version}") from None


def load_train_state(directory: str | Path) -> dict[str, Any] | None:
    """What `fit(..., state=...)` resumes from: train_state.pt plus the weights; None if not saved."""
    directory = Path(directory)
    if not (directory / TRAIN_STATE).is_file():
        return None
    meta = read_meta(directory)
    verify(directory, meta, [TRAIN_STATE, WEIGHTS])
    state = torch_load(directory / TRAIN_STATE)
    state["model"] = torch_load(directory / WEIGHTS)
    return state


def load_resume_state(latest: str | Path) -> tuple[dict[str, Any] | None, Path]:
    """The train state of `latest`, or, if it is damaged, of the newest good checkpoint beside it
    (Ray Train keeps several in one run directory). Each damaged one is reported; none good is an error."""
    latest = Path(latest)
    candidates = [latest] + [d for d in reversed(last_checkpoints(latest.parent, 1000)) if d.resolve() != latest.resolve()]
    damaged = []
    for directory in candidates:
        try:
            return load_train_state(directory), directory
        except CheckpointError as err:
            damaged.append(str(err))
            log.warning("cannot resume from %s: %s", directory, err)
    raise CheckpointError(f"{latest}: no checkpoint of this run can be resumed from ({damaged[0]}); "
                          "remove the run directory to start again")


# --------------------------------------------------------------------------- averaging


def last_checkpoints(run_dir: str | Path, n: int) -> list[Path]:
    """The `n` checkpoint directories under `run_dir` with the highest recorded step, oldest first: one per step
    (a run's `best/` is a copy of one of them, and an average would weigh it twice)."""
    found = []
    for d in sorted(Path(run_dir).iterdir(), key=lambda d: d.name == "best"):  # a step's own folder before best/
        if d.is_dir() and (d / CONFIG).is_file():
            try:
                step = json.loads((d / CONFIG).read_text(encoding="utf-8")).get("step")
            except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
                continue  # a damaged checkpoint has no step to sort by
            if step is not None and step not in {s for s, _ in found}:
                found.append((step, d))
    return [d for _, d in sorted(found)[-n:]]


def average_checkpoints(directories: Sequence[str | Path], out_dir: str | Path | None = None) -> Checkpoint:
    """Parameter-wise mean of several checkpoints of one run (§6.1: the last 5 or 20, written every
    10 minutes). All must share the config and SentencePiece model. Saved to `out_dir` if given."""
    if not directories:
        raise CheckpointError("no checkpoints to average")
    try:
        distinct_checkpoints(directories)
    except ValueError as err:  # the refusals of this function are CheckpointErrors, whoever finds them
        raise CheckpointError(str(err)) from None
    metas = [read_meta(d) for d in directories]
    for d, m in zip(directories[1:], metas[1:]):
        if m["model"] != metas[0]["model"]:
            diff = sorted(k for k in m["model"] if m["model"][k] != metas[0]["model"].get(k))
            raise CheckpointError(f"{d}: model config differs from {directories[0]} in {diff}")
        if m["tokenizer"]["sha256"] != metas[0]["tokenizer"]["sha256"]:
            raise CheckpointError(f"{d}: SentencePiece model differs from {directories[0]}")
    last = load_checkpoint(directories[-1])
    try:
        avg = mean_state((torch_load(Path(d) / WEIGHTS) for d in directories), names=[str(d) for d in directories])
    except ValueError as err:
        raise CheckpointError(str(err)) from None
    load_weights(last.model, avg, "average")
    if out_dir is not None:
        metrics = {"averaged_from": [str(d) for d in directories]}
        save_checkpoint(out_dir, last.model, last.tokenizer, train_cfg=last.train_cfg, step=last.meta.get("step"), metrics=metrics)
        last = dataclasses.replace(last, path=Path(out_dir))
    return last
