"""Token batching: budget, determinism, per-rank shares that are disjoint, equal in count and complete."""

from __future__ import annotations

import numpy as np
import pytest

from mtcore.nmt.batching import BatchingError, TokenBatchSampler, collate
from mtcore.nmt.tokenizer import BOS_ID, EOS_ID, PAD_ID


def lengths(n: int = 500, seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.integers(2, 60, n).tolist(), rng.integers(2, 70, n).tolist()


def padded_tokens(batch, src, tgt):
    return len(batch) * max(max(src[i], tgt[i]) for i in batch)


@pytest.mark.parametrize("max_tokens", [70, 256, 1000, 4096])
def test_token_budget_respected(max_tokens):
    src, tgt = lengths()
    sampler = TokenBatchSampler(src, tgt, max_tokens, seed=1)
    batches = list(sampler)
    assert all(padded_tokens(b, src, tgt) <= max_tokens for b in batches)
    assert len(batches) == len(sampler)
    # batches are of similar lengths: a batch spans a narrow length range
    spans = [np.ptp([max(src[i], tgt[i]) for i in b]) for b in batches]
    assert np.median(spans) <= max(3, max_tokens // 200)


def test_deterministic_with_seed_and_epoch():
    src, tgt = lengths()
    a, b = TokenBatchSampler(src, tgt, 512, seed=3), TokenBatchSampler(src, tgt, 512, seed=3)
    assert list(a) == list(b)
    c = TokenBatchSampler(src, tgt, 512, seed=4)
    assert list(a) != list(c)
    a.set_epoch(1)
    b.set_epoch(1)
    assert list(a) == list(b)
    b.set_epoch(0)
    assert list(a) != list(b)


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
@pytest.mark.parametrize("epoch", [0, 5])
def test_ranks_disjoint_equal_counts_cover_every_pair_once(world_size, epoch):
    src, tgt = lengths(333, seed=world_size)
    shares = []
    for rank in range(world_size):
        s = TokenBatchSampler(src, tgt, 700, seed=9, rank=rank, world_size=world_size)
        s.set_epoch(epoch)
        shares.append(list(s))
        assert len(shares[-1]) == len(s)
    assert len({len(share) for share in shares}) == 1  # DDP: same number of steps on every rank
    seen = [i for share in shares for batch in share for i in batch]
    assert sorted(seen) == list(range(333))  # every pair exactly once, no rank overlaps another


def test_unshuffled_is_length_sorted():
    src, tgt = lengths(100)
    flat = [i for b in TokenBatchSampler(src, tgt, 300, shuffle=False) for i in b]
    keys = [max(src[i], tgt[i]) for i in flat]
    assert keys == sorted(keys)


def test_errors_name_the_problem():
    with pytest.raises(BatchingError, match=r"pair 1 has 90 tokens, more than `max_tokens` \(64\)"):
        TokenBatchSampler([3, 90], [3, 4], 64)
    with pytest.raises(BatchingError, match="cannot give 4 ranks the same number of batches: only 2 pairs"):
        list(TokenBatchSampler([3, 3], [3, 3], 64, world_size=4))


def test_collate_adds_bos_eos_and_pads():
    src, tgt_in, tgt_out = collate([([5, 6, 7], [8]), ([5], [9, 10])])
    assert src.tolist() == [[5, 6, 7, EOS_ID], [5, EOS_ID, PAD_ID, PAD_ID]]
    assert tgt_in.tolist() == [[BOS_ID, 8, PAD_ID], [BOS_ID, 9, 10]]
    assert tgt_out.tolist() == [[8, EOS_ID, PAD_ID], [9, 10, EOS_ID]]
