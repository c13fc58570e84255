"""Token-based batching (§5.1: "batched together by approximate sequence length"), per rank.

A batch holds pairs of similar length up to a budget of *padded* tokens,
rows x max(src_len, tgt_len). Each epoch: pairs are shuffled, sorted by length
(so equal lengths come in random order), cut into batches, and the batch order is
shuffled, all from `(seed, epoch)`, so every rank computes the same plan without
talking to the others. The plan is then dealt round-robin: each rank gets a disjoint
share and every rank gets the same number of batches (DDP needs equal step counts).
To make the count divisible by the number of ranks, the batches with most rows are
halved (never padded with repeats), so every pair is still seen exactly once per epoch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch

from mtcore.errors import MtcoreError
from mtcore.nmt.tokenizer import BOS_ID, EOS_ID, PAD_ID


class BatchingError(MtcoreError, ValueError):
    pass


def plan_batches(lengths: np.ndarray, max_tokens: int, rng: np.random.Generator | None) -> list[np.ndarray]:
    """Greedy cut of the (shuffled unless rng is None, then stably length-sorted) pairs into budgeted batches."""
    order = rng.permutation(len(lengths)) if rng is not None else np.arange(len(lengths))
    order = order[np.argsort(lengths[order], kind="stable")]  # (N,) short to long, ties in random order
    batches, start, longest = [], 0, 0
    for i, idx in enumerate(order):
        n = int(lengths[idx])
        if max(longest, n) * (i - start + 1) > max_tokens and i > start:
            batches.append(order[start:i])
            start, longest = i, 0
        longest = max(longest, n)
    if start < len(order):
        batches.append(order[start:])
    return batches


def _split_to_multiple(batches: list[np.ndarray], k: int) -> list[np.ndarray]:
    """Halve the biggest batches until len(batches) is a multiple of k."""
    batches = list(batches)
    while len(batches) % k:
        biggest = max(range(len(batches)), key=lambda i: (len(batches[i]), -i))
        b = batches[biggest]
        if len(b) < 2:
            raise BatchingError(f"cannot give {k} ranks the same number of batches: only {sum(map(len, batches))} pairs")
        half = len(b) // 2
        batches[biggest : biggest + 1] = [b[:half], b[half:]]
    return batches


class TokenBatchSampler:
    """Yields lists of pair indices for one rank; `set_epoch(e)` before each epoch (as DistributedSampler).

    `src_lens`/`tgt_lens` are the lengths the model sees (source + EOS, BOS/EOS + target).
    A pair longer than `max_tokens` is an error (filter such pairs first).
    """

    def __init__(
        self,
        src_lens: Sequence[int],
        tgt_lens: Sequence[int],
        max_tokens: int,
        *,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        shuffle: bool = True,
    ):
        if len(src_lens) != len(tgt_lens):
            raise BatchingError(f"{len(src_lens)} source lengths but {len(tgt_lens)} target lengths")
        if not 0 <= rank < world_size:
            raise BatchingError(f"rank {rank} is outside world_size {world_size}")
        self.lengths = np.maximum(np.asarray(src_lens, dtype=np.int64), np.asarray(tgt_lens, dtype=np.int64))
        if len(self.lengths) == 0:
            raise BatchingError("no pairs to batch")
        too_long = np.flatnonzero(self.lengths > max_tokens)
        if len(too_long):
            i = int(too_long[0])
            raise BatchingError(
                f"pair {i} has {self.lengths[i]} tokens, more than `max_tokens` ({max_tokens}); "
                f"{len(too_long)} pair(s) exceed it: filter them (TrainConfig.max_len) or raise max_tokens"
            )
        self.max_tokens, self.seed, self.rank, self.world_size, self.shuffle = max_tokens, seed, rank, world_size, shuffle
        self.epoch = 0
        self._cache: tuple[int, list[np.ndarray]] | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _all_batches(self) -> list[np.ndarray]:
        """The whole plan for this epoch, identical on every rank."""
        if self._cache is None or self._cache[0] != self.epoch:
            rng = np.random.default_rng([self.seed, self.epoch]) if self.shuffle else None
            batches = plan_batches(self.lengths, self.max_tokens, rng)
            batches = _split_to_multiple(batches, self.world_size)
            if rng is not None:
                batches = [batches[i] for i in rng.permutation(len(batches))]
            self._cache = (self.epoch, batches)
        return self._cache[1]

    def __iter__(self) -> Iterator[list[int]]:
        for b in self._all_batches()[self.rank :: self.world_size]:
            yield b.tolist()

    def __len__(self) -> int:
        return len(self._all_batches()) // self.world_size


def collate(
    pairs: Sequence[tuple[list[int], list[int]]], device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token-id pairs -> (src (B, S) = ids + EOS, tgt_in (B, T) = BOS + ids, tgt_out (B, T) = ids + EOS), PAD-padded."""
    src = pad([s + [EOS_ID] for s, _ in pairs])
    tgt_in = pad([[BOS_ID] + t for _, t in pairs])
    tgt_out = pad([t + [EOS_ID] for _, t in pairs])
    if torch.device(device).type == "cuda":
        # From pageable memory a copy waits for the GPU's queue to drain; from pinned memory it is queued
        # behind the running step, so the host can prepare the next batch meanwhile.
        return tuple(t.pin_memory().to(device, non_blocking=True) for t in (src, tgt_in, tgt_out))
    return src.to(device), tgt_in.to(device), tgt_out.to(device)


def pad(seqs: Sequence[list[int]]) -> torch.Tensor:
    out = torch.full((len(seqs), max(len(s) for s in seqs)), PAD_ID, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out  # (B, max_len)
