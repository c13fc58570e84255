"""Cosine, ratio margin, Vecalign's normalised cost and the auto threshold, on hand-computed tiny cases."""

from __future__ import annotations

import numpy as np
import pytest

from mtcore.alignment.filter import auto_threshold, misaligned_partners, misaligned_share
from mtcore.alignment.scoring import (
    cosine,
    knn_mean_similarity,
    l2_normalize,
    margin_scores,
    normalized_cost,
    ratio_margin,
    sample_normalizer,
    windowed_knn,
)

X = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
Y = np.array([[1.0, 0.0], [0.6, 0.8]], dtype=np.float32)


def test_cosine_rowwise():
    assert cosine(X, Y) == pytest.approx([1.0, 0.8])
    assert cosine(l2_normalize([[3.0, 4.0]]), l2_normalize([[6.0, 8.0]])) == pytest.approx([1.0])


@pytest.mark.parametrize(
    "k, x_knn, y_knn, margin",
    [
        # k=1: each sentence's best neighbour is its own partner → margin 1
        (1, [1.0, 0.8], [1.0, 0.8], [1.0, 1.0]),
        # k=2: x0 → (1 + .6)/2, x1 → (0 + .8)/2; y0 → (1 + 0)/2, y1 → (.6 + .8)/2
        (2, [0.8, 0.4], [0.5, 0.7], [1.0 / 0.65, 0.8 / 0.55]),
        # k larger than the candidates is clipped
        (5, [0.8, 0.4], [0.5, 0.7], [1.0 / 0.65, 0.8 / 0.55]),
    ],
)
def test_margin_by_hand(k, x_knn, y_knn, margin):
    m, xk, yk = margin_scores(X, Y, k)
    assert xk == pytest.approx(x_knn)
    assert yk == pytest.approx(y_knn)
    assert m == pytest.approx(margin)


def test_knn_chunks_do_not_change_the_result():
    rng = np.random.default_rng(0)
    q, keys = l2_normalize(rng.normal(size=(50, 8))), l2_normalize(rng.normal(size=(30, 8)))
    assert knn_mean_similarity(q, keys, 3, chunk=7) == pytest.approx(knn_mean_similarity(q, keys, 3, chunk=4096))


def test_ratio_margin_formula():
    assert ratio_margin([0.9], [0.5], [0.7]) == pytest.approx([0.9 / 0.6])


def test_vecalign_normalised_cost():
    # (1 − 0.5) · 2 · 1 / (0.4 + 0.6)
    assert normalized_cost([0.5], np.array([0.4]), np.array([0.6]), 2, 1) == pytest.approx([1.0])
    # mean over samples of (1 − cos): (1 − 1) and (1 − 0)
    assert sample_normalizer(np.array([[1.0, 0.0]]), X) == pytest.approx([0.5])


def test_auto_threshold_by_hand():
    real = np.array([0.8, 0.85, 0.9] * 6 + [0.1, 0.2])  # 18 good pairs, 2 bad ones
    mis = np.array([0.05, 0.1, 0.15, 0.2, 0.25, 0.3])
    # π = 2 · share of real below the misaligned median 0.175 = 2 · 1/20; errors F_real − 0.2 · F_mis
    # are least between the highest misaligned score (0.3) and the lowest good one (0.8)
    assert misaligned_share(real, mis) == pytest.approx(0.1)
    assert auto_threshold(real, mis) == pytest.approx(0.55)


def test_auto_threshold_on_a_clean_corpus_rejects_little():
    rng = np.random.default_rng(0)
    real = rng.normal(0.8, 0.1, 1000)  # clean pairs only
    mis = rng.normal(0.1, 0.1, 1000)
    t = auto_threshold(real, mis)
    assert (real < t).mean() < 0.01 and (mis < t).mean() > 0.9


def test_misaligned_partners_stay_in_origin_and_move():
    origins = ["a"] * 5 + ["b"] * 3 + ["c"]
    p = misaligned_partners(origins, len(origins), seed=1)
    assert all(p[i] != i for i in range(len(p)))
    assert all(origins[p[i]] == origins[i] for i in range(8))


def test_windowed_knn_is_exact_below_the_window_and_local_above():
    rng = np.random.default_rng(1)
    x, y = l2_normalize(rng.normal(size=(40, 8))), l2_normalize(rng.normal(size=(40, 8)))
    exact = windowed_knn(x, y, 3, window=64)
    assert exact[0] == pytest.approx(knn_mean_similarity(x, y, 3))
    xw, _ = windowed_knn(x, y, 3, window=20)  # two windows of 20 rows
    assert xw[:20] == pytest.approx(knn_mean_similarity(x[:20], y[:20], 3))
    assert xw[20:] == pytest.approx(knn_mean_similarity(x[20:], y[20:], 3))


def test_near_miss_share_and_false_reject_threshold_by_hand():
    from mtcore.alignment.filter import false_reject_threshold, near_miss_share

    # 90 good pairs at 0.80..0.98 (step .002), 10 bad at 0.30..0.39; near misses 0.30..0.39
    good = np.linspace(0.80, 0.98, 90)
    bad = np.linspace(0.30, 0.39, 10)
    real = np.concatenate([good, bad])
    near = np.linspace(0.30, 0.39, 100)
    assert near_miss_share(real, near) == pytest.approx(0.1, abs=0.02)
    t, share, est = false_reject_threshold(real, near, max_false_reject=0.02)
    assert (bad < t).all()  # every bad pair below
    assert (good < t).sum() <= 2 and est <= 0.02  # at most 2 % of good pairs lost


def test_false_reject_threshold_without_noise_is_the_quantile():
    from mtcore.alignment.filter import false_reject_threshold

    real = np.linspace(0.5, 1.0, 1000)
    near = np.linspace(0.0, 0.2, 100)  # near misses far below: the corpus holds none
    t, share, _ = false_reject_threshold(real, near, max_false_reject=0.05)
    assert share == pytest.approx(0.0)
    assert (real < t).mean() == pytest.approx(0.05, abs=0.002)
