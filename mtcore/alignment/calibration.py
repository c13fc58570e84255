"""Choosing the filter's threshold from the data: which pairs stand in for the bad ones, and for the good.

- `auto_threshold` ("random"): random same-origin pairs as the bad scores, fewest expected
  errors. Random pairs are far easier than real noise: it lets most near misses through.
- `near_miss_threshold` ("near_miss"): near misses made from the corpus (`negatives`) as the
  bad scores; the good scores are what is left of the corpus's once π·near is taken out.
- `reference_threshold` ("reference"): the good scores are *measured*, on pairs known to be
  good (the built-in encoder keeps whole held-out catalogs for this, `reference.parquet`),
  scored as if they were rows of the corpus (a spike-in control, as in assays). Rule "budget"
  (the default, `length_band_thresholds`): in each band of source length, their `max_false_reject`
  quantile, the most noise caught for that share of good pairs lost (a Neyman–Pearson test; a
  Mondrian split-conformal threshold); "budget_pooled": one such quantile for every length; rule
  "fewest_errors": the fewest expected errors against them, within the same budget. No noise share
  and no model of the bad pairs is needed.
"""

from __future__ import annotations

import numpy as np

MAX_FALSE_REJECT = 0.02  # the budget: ≤ 2 % of good pairs lost (see benchmarks/RESULTS.md, issue 21)
# Below this ROC AUC between known-good and random pairs, a score cannot tell them apart and the random-pair
# rule's threshold is an arbitrary crossing of two like distributions (measured: 11–95 % of a corpus rejected
# for five seeds of identical draws; an untrained classifier rejected 81 % of a real one). The built-in
# encoder's margin scores 0.99+.
MIN_RANDOM_AUC = 0.75


def separation(good: np.ndarray, bad: np.ndarray) -> float:
    """ROC AUC: the probability that a good pair scores above a bad one (ties count half)."""
    if not len(good) or not len(bad):
        return float("nan")
    bad_s = np.sort(bad)
    below = np.searchsorted(bad_s, good, side="left")
    ties = np.searchsorted(bad_s, good, side="right") - below
    return float((below + 0.5 * ties).mean() / len(bad_s))


def misaligned_share(real: np.ndarray, misaligned: np.ndarray) -> float:
    """Estimated share π of misaligned pairs in the corpus: twice the share of real pairs scoring
    below the misaligned pairs' median (good pairs almost never do), clipped to [1/n, 0.5]."""
    if not len(real) or not len(misaligned):
        return 0.5
    share = 2.0 * float((real < np.median(misaligned)).mean())
    return float(np.clip(share, 1.0 / len(real), 0.5))


def auto_threshold(real: np.ndarray, misaligned: np.ndarray, share: float | None = None) -> float:
    """The score t with the fewest expected errors, taking the misaligned pairs as the bad pairs' scores.

    With F_real = (1 − π)·F_good + π·F_bad and F_bad ≈ F_mis, the expected error rate at t
    is π·(1 − F_mis(t)) + (1 − π)·F_good(t) = π + F_real(t) − 2π·F_mis(t), minimised over
    midpoints between consecutive distinct scores. π is `misaligned_share` unless given.
    (π = 0.5 gives Youden's J / the Kolmogorov–Smirnov point, which on a mostly clean
    corpus rejects far too many good pairs.)
    """
    values = np.unique(np.concatenate([real, misaligned]))
    if len(values) < 2:
        return float(values[0]) if len(values) else 0.0
    share = misaligned_share(real, misaligned) if share is None else share
    cands = (values[:-1] + values[1:]) / 2
    real_s, mis_s = np.sort(real), np.sort(misaligned)
    f_mis = np.searchsorted(mis_s, cands) / max(1, len(mis_s))
    f_real = np.searchsorted(real_s, cands) / max(1, len(real_s))
    return float(cands[int(np.argmin(f_real - 2.0 * share * f_mis))])


def near_miss_share(real: np.ndarray, near: np.ndarray) -> float:
    """Estimated noise share π from the near-miss scores as the bad pairs' distribution.

    F_real(t) = (1 − π)·F_good(t) + π·F_bad(t) ≥ π·F_bad(t) for every t, so π ≤ F_real(t) / F_bad(t);
    the tightest of these bounds over the bad scores' deciles (10 %–90 %: where F_bad is well
    estimated) is the estimate. A mixture-proportion estimate in the style of Storey's π₀, with
    no assumption on the share itself; clipped to [0, 0.5].
    """
    if not len(real) or not len(near):
        return 0.0
    qs = np.quantile(near, np.linspace(0.1, 0.9, 9))
    real_s = np.sort(real)
    f_real = np.searchsorted(real_s, qs, side="right") / len(real_s)
    f_bad = np.searchsorted(np.sort(near), qs, side="right") / len(near)
    return float(np.clip(np.min(f_real / np.maximum(f_bad, 1e-9)), 0.0, 0.5))


def false_reject_threshold(real: np.ndarray, near: np.ndarray, max_false_reject: float = MAX_FALSE_REJECT, share: float | None = None) -> tuple[float, float, float]:
    """(threshold, π, estimated false-reject rate): the highest score t such that the estimated share
    of *good* pairs below t stays ≤ `max_false_reject` for every t' ≤ t.

    F_good(t) is estimated by taking π·F_near out of the corpus's own distribution:
    F_good(t) ≈ max(0, F_real(t) − π·F_near(t)) / (1 − π), π from `near_miss_share`. With π = 0
    this is the `max_false_reject` quantile of the corpus's scores.
    """
    if not len(real):
        return 0.0, 0.0, 0.0
    share = near_miss_share(real, near) if share is None else share
    values = np.unique(np.concatenate([real, near]))
    cands = np.concatenate([[values[0] - 1e-6], (values[:-1] + values[1:]) / 2]) if len(values) > 1 else values
    f_real = np.searchsorted(np.sort(real), cands) / len(real)
    f_near = np.searchsorted(np.sort(near), cands) / max(1, len(near)) if len(near) else np.zeros(len(cands))
    f_good = np.maximum(0.0, f_real - share * f_near) / max(1e-9, 1.0 - share)
    over = np.flatnonzero(f_good > max_false_reject)
    i = (over[0] - 1) if len(over) else len(cands) - 1
    i = max(i, 0)
    return float(cands[i]), share, float(f_good[i])


def near_miss_threshold(real: np.ndarray, misaligned: np.ndarray, near: np.ndarray, max_false_reject: float = MAX_FALSE_REJECT) -> tuple[float, float, float, float]:
    """(threshold, π, estimated false rejects, random-rule threshold): `false_reject_threshold` on the
    near misses, capped so that at most `max_false_reject` of the corpus goes beyond the random-pair
    rule, and never below `auto_threshold` on the random pairs. Random noise in a corpus sits below
    every near miss, where π·F_near ≈ 0, so it reads as "good pairs lost" and would pull t down."""
    t, share, est = false_reject_threshold(real, near, max_false_reject)
    t_random = auto_threshold(real, misaligned) if len(misaligned) else t
    # π is an upper bound, loose where good pairs overlap the near misses (a weak encoder); then t
    # overshoots (measured: 6–8 % of good pairs lost on a corpus without near misses). Cap: at most
    # `max_false_reject` of the corpus rejected beyond what the random-pair rule rejects.
    cap = float(np.quantile(real, min(1.0, float((real < t_random).mean()) + max_false_reject))) if len(real) else t
    return max(min(t, cap), t_random), share, est, t_random


REFERENCE_RULES = ("budget", "budget_pooled", "fewest_errors")
# Length bands of the "budget" rule, by the source's words: 1 word, 2-3 words, 4 words and more. One threshold for
# every length spent the budget on one-word labels (measured: 35 of the 44 good pairs a pooled threshold lost on the real
# outdated set were one-word sources, 9 % of them, against 0.1 % of the pairs of 4+ words), where a score has least to
# read, and left the longer pairs, where most real near misses are, at 0.1 % (benchmarks/RESULTS.md, issue 21).
LENGTH_BANDS = (1, 3)  # the bands' upper word counts; the last band is open
BAND_NAMES = ("1 word", "2-3 words", "4+ words")
MIN_BAND_REFERENCE = 100  # a band with fewer known-good pairs than this takes the pooled threshold: 2 % of it is < 2 pairs
# The band quantiles are taken low where the reference's catalogs disagree (`catalog_quantile`): its 10 % point over
# 200 draws of catalogs. Measured with three draws of the built-in encoder on held-out catalogs (clean, real outdated,
# made near misses): good pairs lost 0.7-1.9 % at the 10 % point, 1.0-2.4 % at the 25 % point, and 1.2-2.8 % with the
# plain quantile on the real outdated and made near-miss sets (benchmarks/RESULTS.md, issue 21).
BOOTSTRAP_DRAWS, BOOTSTRAP_LEVEL = 200, 0.10


def length_bands(texts: list[str]) -> np.ndarray:
    """Each text's band (0 .. len(LENGTH_BANDS)) by its whitespace-separated words. A language written without spaces
    puts every sentence in the first band: then the bands are one, as with `budget_pooled`."""
    words = np.fromiter((len(t.split()) for t in texts), dtype=np.int64, count=len(texts))
    return np.searchsorted(np.asarray(LENGTH_BANDS), words, side="left")


def catalog_quantile(values: np.ndarray, groups: np.ndarray | None, q: float, seed: int = 0) -> float:
    """The q quantile of `values`, taken low where their groups (the reference's catalogs) disagree: the
    BOOTSTRAP_LEVEL quantile of its distribution over BOOTSTRAP_DRAWS draws of whole groups with replacement.
    Reference pairs come as whole catalogs, and a catalog's pairs score alike, so the quantile of one draw of
    catalogs is less sure than its pair count says (measured: one pooled threshold lost 0.4-1.2 % of the good pairs
    of held-out catalogs for three draws of reference catalogs). Without groups, or with one, the plain quantile."""
    if groups is None or len(np.unique(groups)) < 2:
        return float(np.quantile(values, q))
    names, group_of = np.unique(groups, return_inverse=True)
    members = [values[group_of == g] for g in range(len(names))]
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(BOOTSTRAP_DRAWS):
        picked = [members[g] for g in rng.integers(0, len(names), len(names))]
        drawn = np.concatenate(picked)
        if len(drawn):
            draws.append(np.quantile(drawn, q))
    return float(np.quantile(draws, BOOTSTRAP_LEVEL)) if draws else float(np.quantile(values, q))


def length_band_thresholds(real: np.ndarray, misaligned: np.ndarray, reference: np.ndarray, real_band: np.ndarray,
                           ref_band: np.ndarray, ref_group: np.ndarray | None = None,
                           max_false_reject: float = MAX_FALSE_REJECT) -> tuple[np.ndarray, float, float, float]:
    """(threshold of each length band, π below them, estimated false rejects, random-rule threshold): rule "budget".

    Mondrian (per-category) split-conformal: each band's threshold is the `max_false_reject` quantile of the
    known-good pairs of that band (`catalog_quantile`), so that at most that share of the good pairs of *every*
    length is lost, not that share of all of them, lost mostly among the shortest. A band with fewer than
    MIN_BAND_REFERENCE known-good pairs takes the pooled quantile. Each is floored at the random-pair rule's threshold,
    as in `reference_threshold`."""
    usable = separation(reference, misaligned) >= MIN_RANDOM_AUC
    t_random = auto_threshold(real, misaligned) if len(misaligned) and usable else -np.inf
    pooled = catalog_quantile(reference, ref_group, max_false_reject)
    bands = np.full(len(LENGTH_BANDS) + 1, pooled)
    for b in range(len(bands)):
        mine = ref_band == b
        if mine.sum() >= MIN_BAND_REFERENCE:
            bands[b] = catalog_quantile(reference[mine], None if ref_group is None else ref_group[mine], max_false_reject)
    bands = np.maximum(bands, t_random)
    est_fr = float((reference < bands[ref_band]).mean())
    below = float((real < bands[real_band]).mean()) if len(real) else 0.0
    share = max(0.0, (below - est_fr) / max(1e-9, 1.0 - est_fr))
    return bands, share, est_fr, float(t_random)


def reference_threshold(real: np.ndarray, misaligned: np.ndarray, reference: np.ndarray,
                        max_false_reject: float = MAX_FALSE_REJECT, rule: str = "budget") -> tuple[float, float, float, float]:
    """(threshold, π below it, estimated false rejects, random-rule threshold).

    The reference (known-good) pairs' scores give the good pairs' distribution F_good, measured rather
    than modelled. With F_real = (1 − π)·F_good + π·F_bad, rejecting below t costs
    errors(t) = (1 − π)·F_good(t) + π·(1 − F_bad(t)) = π − F_real(t) + 2(1 − π)·F_good(t):
    the same fewest-errors rule as `auto_threshold`, with the good side measured instead of the bad
    side guessed. π is unknown and taken as 0, which errs toward keeping: a score band is rejected
    only where the corpus has more than twice the reference's density, i.e. where most of its pairs
    are bad. So a clean corpus loses almost nothing, and a noisy one loses its noise, whatever its
    share. t is the best such point among those rejecting at most `max_false_reject` of the reference,
    and never below the random-pair rule's (random noise is always worth removing).

    rule "budget" spends the false-reject budget instead (Neyman–Pearson: the most bad pairs caught with at
    most `max_false_reject` of the good ones lost): t is the highest score below which at most that share of
    the reference lies, its `max_false_reject` quantile. Fewest errors weighs a lost good pair as much as a
    kept bad one, so where near misses overlap the good pairs (real noise) it keeps them all; the budget rule
    rejects the lowest-scoring `max_false_reject` of good-looking pairs whatever the corpus, a clean one too.

    π is the share of the corpus below t beyond the expected false rejects: π ≥ (F_real(t) − FR)/(1 − FR),
    a lower bound on the noise share (noise that scores like good pairs cannot be counted). The random-pair
    floor applies only where the score tells the reference from random pairs (`MIN_RANDOM_AUC`)."""
    usable = not len(reference) or separation(reference, misaligned) >= MIN_RANDOM_AUC
    t_random = auto_threshold(real, misaligned) if len(misaligned) and usable else -np.inf
    if not len(reference) or not len(real):
        t = float(t_random) if np.isfinite(t_random) else 0.0
    else:
        cands = np.unique(np.concatenate([real, reference]))  # t = cands[i] rejects the scores below it
        f_real = np.searchsorted(np.sort(real), cands) / len(real)
        f_good = np.searchsorted(np.sort(reference), cands) / len(reference)
        if rule in ("budget", "budget_pooled"):  # "budget" by length is `length_band_thresholds`; pooled here
            gain = np.where(f_good <= max_false_reject, cands, -np.inf)  # the highest t within the budget
        elif rule == "fewest_errors":
            gain = np.where(f_good <= max_false_reject, f_real - 2.0 * f_good, -np.inf)
        else:
            raise ValueError(f"reference rule: one of {REFERENCE_RULES}, not {rule!r}")
        t = max(float(cands[int(np.argmax(gain))]), float(t_random))
    est_fr = float((reference < t).mean()) if len(reference) else 0.0
    below = float((real < t).mean()) if len(real) else 0.0
    share = max(0.0, (below - est_fr) / max(1e-9, 1.0 - est_fr))
    return float(t), share, est_fr, float(t_random)
