"""Dual conditional cross-entropy: how well two translation models, one per direction, agree that a pair fits.

Junczys-Dowmunt (2018), "Dual Conditional Cross-Entropy Filtering of Noisy Parallel Corpora"
(WMT18 filtering task, §3): with H_A(y|x) the per-token cross-entropy of the target under a
source→target model and H_B(x|y) that of the source under a target→source model,

    cost(x, y) = |H_A(y|x) − H_B(x|y)| + ½ (H_A(y|x) + H_B(x|y))

is low only when both directions find the pair likely *and* agree about it. A sentence encoder
pools each side into one vector, so an outdated translation that shares most of its words with
the right one ("Show backup files" kept with the translation of "Show hidden files") stays close;
a translation model scores every target token against the source and pays for the one word
that does not follow. Scores here are −cost, so that, as with cosine and margin, higher means
better aligned and a pair is rejected below the threshold.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from mtcore.errors import MtcoreError
from mtcore.nmt.checkpoint import Checkpoint, read_meta
from mtcore.nmt.decoding import encode_sources, sequence_scores


class DirectionError(MtcoreError, ValueError):
    """The two models are not each other's reverse."""


def check_directions(forward: Checkpoint | str | Path, reverse: Checkpoint | str | Path,
                     langs: tuple[str, str] | None = None) -> None:
    """Loaded checkpoints or checkpoint directories (their config.json alone is read); `langs`: the corpus's
    (source, target), which the forward model must translate (given the other way round, the two models
    score every pair in the wrong direction and reject good pairs)."""
    (fp, f), (rp, r) = (_direction(c) for c in (forward, reverse))
    if f != (r[1], r[0]):
        raise DirectionError(f"dual cross-entropy needs two opposite directions: {fp} is {f[0]}→{f[1]} "
                             f"and {rp} is {r[0]}→{r[1]}")
    if langs is not None and f != tuple(langs):
        swap = " (the two in the other order?)" if f == (langs[1], langs[0]) else ""
        raise DirectionError(f"--nmt FORWARD must translate the corpus's {langs[0]}→{langs[1]}: {fp} is "
                             f"{f[0]}→{f[1]}{swap}")


def _direction(ckpt: Checkpoint | str | Path) -> tuple[Path, tuple[str, str]]:
    if isinstance(ckpt, Checkpoint):
        return ckpt.path, (ckpt.model_cfg.src_lang, ckpt.model_cfg.tgt_lang)
    model = read_meta(ckpt)["model"]
    return Path(ckpt), (model.get("src_lang", "en"), model.get("tgt_lang", "vi"))


def cross_entropies(model: Checkpoint, sources: Sequence[str], targets: Sequence[str], batch_size: int = 64,
                    max_len: int = 256) -> np.ndarray:
    """Per-token cross-entropy (nats, EOS included) of each target given its source, by forced decoding.

    Pairs are scored in order of length, so that a batch pads little, and returned in input order."""
    max_len = min(max_len, model.model_cfg.max_positions)
    src = encode_sources(model.tokenizer, sources, max_len=max_len)
    tgt = [ids[: max_len - 1] for ids in model.tokenizer.encode(list(targets))]
    order = np.argsort([len(s) + len(t) for s, t in zip(src, tgt)], kind="stable")
    scores = sequence_scores(model.model, [src[i] for i in order], [tgt[i] for i in order], batch_size)
    out = np.empty(len(order))
    out[order] = -np.asarray(scores, dtype=np.float64)
    return out


def dual_xent(h_forward: np.ndarray, h_reverse: np.ndarray) -> np.ndarray:
    """−cost of Junczys-Dowmunt (2018) from the two per-token cross-entropies: higher is better aligned."""
    return -(np.abs(h_forward - h_reverse) + 0.5 * (h_forward + h_reverse))


def dual_xent_scores(forward: Checkpoint, reverse: Checkpoint, sources: Sequence[str], targets: Sequence[str],
                     batch_size: int = 64) -> np.ndarray:
    """Dual conditional cross-entropy score of each (source, target) pair; `forward` translates source→target."""
    check_directions(forward, reverse)
    return dual_xent(cross_entropies(forward, sources, targets, batch_size),
                     cross_entropies(reverse, targets, sources, batch_size))
