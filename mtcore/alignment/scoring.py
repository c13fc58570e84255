"""Similarity scores between sentence embeddings: cosine, ratio margin, Vecalign's normalised cost.

Every function takes L2-normalised float32 matrices (rows are sentences), so that a
dot product is a cosine. They are plain NumPy/PyTorch, usable inside a Ray Data
`map_batches` or on the driver alike.

- cosine: the pair's own similarity.
- ratio margin (Artetxe & Schwenk 2019, "Margin-based Parallel Corpus Mining",
  eq. 1 with the ratio form): cos(x, y) divided by the mean of the average
  similarity of x to its k nearest targets and of y to its k nearest sources.
  A hub sentence that is close to everything scores low; a pair that stands out
  from its neighbourhood scores high. Values > 1 mean "closer than the neighbours".
- normalised cost (Thompson & Koehn 2019, Vecalign §3):
  c(x, y) = (1 − cos(x, y)) · n(x) · n(y) / (Σ_s (1 − cos(x, y_s)) + Σ_s (1 − cos(x_s, y)))
  with x_s, y_s sampled from the documents; n(·) the number of sentences in a block.
  We use means over the samples instead of sums (a constant factor S), so that a
  random 1-1 pair costs ≈ 0.5 whatever S is.
"""

from __future__ import annotations

import numpy as np
import torch

SCORES = ("cosine", "margin", "dual_xent", "classifier")  # the scores `align_filter --score` accepts (dual_xent.py, classifier.py)
DEFAULT_K = 4  # neighbours for the margin, as in Artetxe & Schwenk's mining experiments
MARGIN_WINDOW = 16_384  # rows searched for neighbours: exact below, windowed above (see `windowed_knn`)


def l2_normalize(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norm = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.maximum(norm, 1e-12)


def cosine(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Row-wise cosine of normalised pairs: (N, d), (N, d) -> (N,)."""
    return np.einsum("nd,nd->n", x, y).astype(np.float64)


def knn_mean_similarity(queries: np.ndarray, keys: np.ndarray, k: int = DEFAULT_K, chunk: int = 1024,
                        own: np.ndarray | None = None) -> np.ndarray:
    """Mean cosine of each query to its k most similar keys: (Q, d), (K, d) -> (Q,).

    Brute force in chunks of queries (a (chunk, K) similarity block at a time); k is clipped to the
    number of candidates. `own` (Q,): each query's similarity to its own partner, counted among the
    candidates — the neighbourhood a query that is not in `keys` would have as one more row of the
    corpus whose sentences are `keys`.
    """
    k = max(1, min(k, len(keys) + (own is not None)))
    keys_t = torch.from_numpy(np.ascontiguousarray(keys, dtype=np.float32))
    out = np.empty(len(queries), dtype=np.float64)
    for start in range(0, len(queries), chunk):
        q = torch.from_numpy(np.ascontiguousarray(queries[start : start + chunk], dtype=np.float32))
        sims = q @ keys_t.T  # (chunk, K)
        if own is not None:
            mine = torch.from_numpy(np.ascontiguousarray(own[start : start + chunk], dtype=np.float32))[:, None]
            sims = torch.cat([sims, mine], dim=1)
        out[start : start + len(q)] = sims.topk(k, dim=1).values.mean(dim=1).double().numpy()
    return out


def windowed_knn(x: np.ndarray, y: np.ndarray, k: int = DEFAULT_K, window: int = MARGIN_WINDOW) -> tuple[np.ndarray, np.ndarray]:
    """(x_knn, y_knn): neighbours of each x among the y of its window of rows, and vice versa.

    Up to `window` rows this is the exact global kNN. Beyond, rows are cut into
    consecutive windows of about `window` rows and neighbours are searched within
    each: O(n · window) instead of O(n²). A corpus in catalog order keeps the same
    catalog's messages (the nearest, hardest neighbours) in the same window.
    """
    n = len(x)
    parts = max(1, -(-n // window))
    bounds = np.linspace(0, n, parts + 1).astype(int)
    x_knn, y_knn = np.empty(n), np.empty(n)
    for a, b in zip(bounds[:-1], bounds[1:]):
        x_knn[a:b] = knn_mean_similarity(x[a:b], y[a:b], k)
        y_knn[a:b] = knn_mean_similarity(y[a:b], x[a:b], k)
    return x_knn, y_knn


def ratio_margin(pair_cos: np.ndarray, x_knn: np.ndarray, y_knn: np.ndarray) -> np.ndarray:
    """margin(x, y) = cos(x, y) / ((knn_x + knn_y) / 2), knn_* from `knn_mean_similarity`."""
    denom = (np.asarray(x_knn, dtype=np.float64) + np.asarray(y_knn, dtype=np.float64)) / 2.0
    return np.asarray(pair_cos, dtype=np.float64) / np.maximum(denom, 1e-6)


def margin_scores(
    x: np.ndarray, y: np.ndarray, k: int = DEFAULT_K, window: int = MARGIN_WINDOW
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ratio margin of the pairs (x_i, y_i) with neighbours from y (for x) and x (for y), see `windowed_knn`.

    Returns (margin, x_knn, y_knn); keep the knn means to score other pairings of the
    same sentences (e.g. shuffled ones) without another neighbour search.
    """
    x_knn, y_knn = windowed_knn(x, y, k, window)
    return ratio_margin(cosine(x, y), x_knn, y_knn), x_knn, y_knn


def sample_normalizer(x: np.ndarray, samples: np.ndarray) -> np.ndarray:
    """Mean of (1 − cos(x_i, s)) over the sampled sentences s: (N, d), (S, d) -> (N,)."""
    return (1.0 - x @ samples.T).mean(axis=1).astype(np.float64)


def normalized_cost(
    pair_cos: np.ndarray, x_norm: np.ndarray, y_norm: np.ndarray, nx: int | np.ndarray = 1, ny: int | np.ndarray = 1
) -> np.ndarray:
    """Vecalign's cost: (1 − cos) · n(x) · n(y) / (norm_x + norm_y), norms from `sample_normalizer`."""
    return (1.0 - np.asarray(pair_cos, dtype=np.float64)) * nx * ny / np.maximum(x_norm + y_norm, 1e-6)
