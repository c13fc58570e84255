"""Noised back-translation output (Edunov et al. 2018, "Understanding Back-Translation at Scale", §3.1).

The beam output is perturbed the way Lample et al. 2018 noise autoencoder input:
each word is deleted with probability 0.1, replaced by a filler token with
probability 0.1, and words are shuffled locally ("a random permutation ...
restricted to swapping words no further than three positions apart"): word i gets
key i + U(0, k) and words are sorted by key, so no word moves k or more positions.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TypeVar

from mtcore.nmt.tokenizer import BT_TAG

T = TypeVar("T")

FILLER = "<unk>"  # fairseq fills with the dictionary's unk; SentencePiece spells it as pieces of "<unk>"


def noise_words(
    words: Sequence[T],
    rng: random.Random,
    *,
    p_delete: float = 0.1,
    p_replace: float = 0.1,
    max_shuffle: int = 3,
    filler: T = FILLER,
) -> list[T]:
    """Delete, replace by `filler`, then locally shuffle. Works on any sequence (words or token ids).

    A non-empty input never comes back empty (one word survives a full deletion).
    """
    kept = []
    for w in words:
        r = rng.random()
        if r < p_delete:
            continue
        kept.append(filler if r < p_delete + p_replace else w)
    if not kept and words:
        kept = [words[rng.randrange(len(words))]]
    if max_shuffle > 1:
        keys = [i + rng.uniform(0, max_shuffle) for i in range(len(kept))]
        kept = [w for _, w in sorted(zip(keys, kept), key=lambda kw: kw[0])]
    return kept


def noise_text(text: str, rng: random.Random, **kwargs) -> str:
    """Word-level noise on whitespace-separated text; a leading `<bt>` tag is left in place."""
    words = text.split()
    tag = []
    if words and words[0] == BT_TAG:
        tag, words = words[:1], words[1:]
    return " ".join(tag + noise_words(words, rng, **kwargs))
