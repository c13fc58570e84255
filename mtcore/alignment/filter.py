"""Pair filtering by embedding similarity: score once, decide later (OpusFilter's `score`/`accept`).

1. Encode both sides of every pair (`embed_pairs`: in process, or `embed_pairs_ray`:
   Ray Data with the encoder in an actor pool, one model load per actor, GPUs
   when the cluster has them).
2. Score (`PairScores`): the pair's cosine, and the ratio margin over k nearest
   neighbours (Artetxe & Schwenk 2019) against the other sentences of the corpus;
   with `score="dual_xent"`, also the dual conditional cross-entropy of two translation
   models (`dual_xent.py`, Junczys-Dowmunt 2018), in an actor pool like the encoder; with
   `score="classifier"`, the logit of a pair classifier that reads both sentences at once
   (`classifier.py`: Bicleaner-AI's idea, trained on near misses made from the corpus).
   (Above `margin_window` rows, neighbours come from the pair's window of rows:
   O(n·w), not O(n²); see `scoring.windowed_knn`.)
   The same scores are computed for *deliberately misaligned* pairs made from the
   corpus itself: random ones (each source with the target of another row of the
   same origin) and near misses (`negatives`: the most similar other source's
   translation, the neighbouring segment, a partial translation, a swapped number,
   option, placeholder or name).
3. Decide: keep pairs whose score ≥ threshold. `threshold="auto"` calibrates on
   the data itself, by `calibration` (the rules are in `calibration.py`):
   - "reference" (default): the scores of pairs known to be good (`reference`, or the
     encoder's own `reference.parquet`: the built-in encoder holds out whole catalogs for
     this), scored as if they were rows of the corpus, are the good pairs' distribution.
     `reference_rule` "budget" (default): the threshold is their `max_false_reject` quantile in
     each band of source length (1 word, 2-3, 4+; `calibration.length_band_thresholds`), the most
     noise caught with that share of good pairs lost; "budget_pooled": one quantile for every
     length; "fewest_errors": the fewest expected errors against them, within the same budget
     (keeps near misses that overlap good pairs). None assumes a noise share or a kind of
     noise. Without reference pairs, "near_miss".
   - "near_miss": the near-miss pairs stand in for the bad pairs' scores; the noise share
     π is estimated from the corpus (`near_miss_share`) and the good pairs' distribution
     is what remains of the corpus's once π·bad is taken out. Capped and floored (see
     `near_miss_threshold`), so it cannot follow a corpus with much noise.
   - "random": the first rule (`auto_threshold`): random pairs as the bad scores, fewest
     expected errors. Random pairs are far easier than real noise, so it underestimates
     the noise share and lets most near misses through (issue 21). Every rule is floored
     at its threshold: random noise is always worth removing.

`filter_corpus` is the stage: `kept/`, `rejects/` (REJECT_SCHEMA, reason
`low_cosine`/`low_margin`/`low_dual_xent`/`low_classifier`, the score, the threshold in `detail`), `scores.parquet`
(every row's scores, for re-thresholding without re-encoding), `report.json`
(reconciled), `histogram.png`, and an MLflow run in the `align_filter` experiment.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mtcore import checks
from mtcore.console import progress_line
from mtcore.alignment import negatives
from mtcore.alignment.calibration import (  # noqa: F401 - re-exported: benchmarks and users import them from here
    BAND_NAMES,
    MAX_FALSE_REJECT,
    MIN_BAND_REFERENCE,
    MIN_RANDOM_AUC,
    REFERENCE_RULES,
    auto_threshold,
    false_reject_threshold,
    length_band_thresholds,
    length_bands,
    misaligned_share,
    near_miss_share,
    near_miss_threshold,
    reference_threshold,
    separation,
)
from mtcore.errors import MtcoreError
from mtcore.alignment.scoring import DEFAULT_K, MARGIN_WINDOW, SCORES, cosine, knn_mean_similarity, ratio_margin, windowed_knn

log = logging.getLogger(__name__)
STAGE = "align_filter"
EXPERIMENT = "align_filter"
REASONS = {"cosine": "low_cosine", "margin": "low_margin", "dual_xent": "low_dual_xent", "classifier": "low_classifier"}
CALIBRATIONS = ("reference", "near_miss", "random")
PAIR_MODELS = ("dual_xent", "classifier")  # scores a model computes from the pair's text, beside the encoder's
# Below this many distinct pairs, cosine scores them: a small corpus of one catalog is its own messages' neighbourhood,
# which raises every margin's denominator, and the margin rejected 10 % of clean 20-pair windows and 4 % of 50-pair
# ones against cosine's 2.5 % and 1.2 %; from 200 pairs the two are within a point (benchmarks/align_small_corpus.py).
MIN_MARGIN_PAIRS = 200
MIN_JUDGED_PAIRS = 20  # distinct pairs below which the random-pair comparisons judge nothing (partners repeat)
COPY_SHARE = 0.2  # copies (target = source) above this share of a corpus are worth a warning
# The code a filtered corpus depends on (its fingerprint): the encoder reads text through the cleaning's
# accelerator view and the tokenizer's normalisation
ALIGNMENT_CODE = ("mtcore.alignment", "mtcore.embedding", "mtcore.data", "mtcore.cleaning.normalize", "mtcore.nmt.tokenizer")
FAR_REJECT_SHARE = 0.10  # a corpus far below the reference pairs is worth a warning when this much of it is rejected


class FilterError(MtcoreError, ValueError):
    pass


@dataclass
class FilterConfig:
    encoder: str = "builtin"
    score: str = "margin"  # or "cosine"; margin separates better on the held-out benchmark
    threshold: str | float = "auto"
    k: int = DEFAULT_K  # neighbours for the margin
    margin_window: int = MARGIN_WINDOW  # rows searched for neighbours (exact kNN below this size)
    batch_size: int = 1024  # rows per Ray Data batch / per encoder call
    num_actors: int = 0  # 0: one per CPU (or per GPU) of the cluster
    seed: int = 0  # for the misaligned calibration pairs
    calibration: str = "reference"  # or "near_miss", "random" (module docstring; measured in RESULTS.md, issue 21)
    max_false_reject: float = MAX_FALSE_REJECT  # target share of good pairs rejected ("reference", "near_miss")
    reference_rule: str = "budget"  # or "budget_pooled", "fewest_errors" (calibration.py; measured in RESULTS.md, issue 21)
    reference: str = ""  # known-good pairs for "reference" (any corpus format); "": the encoder's reference.parquet
    synthetic_rows: int = 4000  # rows given a partial/swapped target for calibration (encoded once more)
    # score "dual_xent": mtcore checkpoints translating source→target and target→source (dual_xent.py)
    nmt_forward: str = ""
    nmt_reverse: str = ""
    langs: tuple[str, str] = ("en", "vi")  # the corpus's (source, target) languages: Moses suffixes, encoder, models

    def __post_init__(self):
        self.langs = checks.language_pair("-".join(self.langs))
        checks.at_least("--k", self.k, 1)
        for name in ("margin_window", "batch_size"):
            checks.at_least(name, getattr(self, name), 1)
        checks.at_least("num_actors", self.num_actors, 0)
        if self.score not in SCORES:
            raise FilterError(f"--score: one of {list(SCORES)}, not {self.score!r}")
        if self.score != "dual_xent" and (self.nmt_forward or self.nmt_reverse):
            raise FilterError("--nmt is for --score dual_xent; with --score cosine or margin it would be ignored")
        if self.score == "dual_xent":
            if not (self.nmt_forward and self.nmt_reverse):
                raise FilterError("score dual_xent needs two translation models: --nmt FORWARD REVERSE "
                                  "(checkpoint directories, source→target and target→source)")
            from mtcore.alignment.dual_xent import check_directions

            check_directions(self.nmt_forward, self.nmt_reverse, self.langs)  # names the directory at fault
        if self.calibration not in CALIBRATIONS:
            raise FilterError(f"--calibration: one of {list(CALIBRATIONS)}, not {self.calibration!r}")
        if self.reference_rule not in REFERENCE_RULES:
            raise FilterError(f"--reference-rule: one of {list(REFERENCE_RULES)}, not {self.reference_rule!r}")
        if not 0.0 < float(self.max_false_reject) < 0.5:
            raise FilterError(f"--max-false-reject: {self.max_false_reject!r} is out of range; pass a share of good pairs "
                              f"in (0, 0.5), e.g. 0.02")
        if self.threshold != "auto":
            try:
                self.threshold = float(self.threshold)
            except (TypeError, ValueError):
                raise FilterError(f"--threshold: 'auto' or a number, not {self.threshold!r}") from None
            if not np.isfinite(self.threshold):
                raise FilterError(f"--threshold: {self.threshold!r} is not a finite number")
            given = [name for name, value, default in (("--reference", self.reference, ""), ("--calibration", self.calibration, "reference"),
                                                       ("--max-false-reject", self.max_false_reject, MAX_FALSE_REJECT),
                                                       ("--reference-rule", self.reference_rule, "budget"))
                     if value != default]
            if given:  # they choose an automatic threshold: beside a given one they would be ignored
                raise FilterError(f"{', '.join(given)} choose(s) the threshold under --threshold auto; with --threshold "
                                  f"{self.threshold:g} it would be ignored")
        if self.calibration != "reference" and self.reference_rule != "budget":
            raise FilterError(f"--reference-rule is for --calibration reference; with {self.calibration!r} it would be ignored")
        if self.threshold == "auto" and self.calibration == "random" and self.max_false_reject != MAX_FALSE_REJECT:
            raise FilterError("--max-false-reject is for --calibration reference or near_miss; the random-pair rule "
                              "minimises expected errors and would ignore it")
        if self.reference:
            from mtcore.data.corpus import CorpusError, check_exists

            if self.calibration != "reference":
                raise FilterError(f"--reference is for --calibration reference; with {self.calibration!r} it would be ignored")
            try:
                check_exists(self.reference, *self.langs)
            except CorpusError as err:
                raise FilterError(f"--reference {err} (known-good pairs to calibrate on)") from None


# --------------------------------------------------------------------------- encoding


def embed_pairs(table: pa.Table, encoder, batch_size: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """(X, Y) unit rows for src and tgt, in process."""
    src, tgt = table["src"].to_pylist(), table["tgt"].to_pylist()
    return encoder.encode(src, batch_size=batch_size), encoder.encode(tgt, batch_size=batch_size)


class EncodePairs:
    """Ray Data actor: loads the encoder once, then embeds batches of pairs."""

    def __init__(self, spec: str, device: str = "cpu"):
        from mtcore.embedding import load_encoder

        self.encoder = load_encoder(spec, device=device)

    def __call__(self, batch: dict) -> dict:
        x = self.encoder.encode(list(batch["src"]))
        y = self.encoder.encode(list(batch["tgt"]))
        return {"_row": batch["_row"], "src_emb": x, "tgt_emb": y}


def embed_pairs_ray(table: pa.Table, spec: str, batch_size: int = 1024, num_actors: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(X, Y) as `embed_pairs`, encoded by a Ray Data actor pool; rows come back in input order.

    `spec` must be loadable on the workers (`resolve_encoder` turns "builtin" into its directory).
    """
    out = map_pairs_ray(table, EncodePairs, {"spec": spec}, ("src_emb", "tgt_emb"), batch_size, num_actors)
    return out["src_emb"], out["tgt_emb"]


class DualXentPairs:
    """Ray Data actor: loads the two translation models once, then scores batches of pairs."""

    def __init__(self, forward: str, reverse: str, device: str = "cpu"):
        from mtcore.nmt.checkpoint import load_checkpoint

        self.forward, self.reverse = load_checkpoint(forward, device=device), load_checkpoint(reverse, device=device)

    def __call__(self, batch: dict) -> dict:
        from mtcore.alignment.dual_xent import dual_xent_scores

        return {"_row": batch["_row"], "dual_xent": dual_xent_scores(self.forward, self.reverse, list(batch["src"]), list(batch["tgt"]))}


class ClassifierPairs:
    """Ray Data actor: loads the pair classifier of an encoder directory once, then scores batches of pairs."""

    on_gpu = False  # small: a pool of CPU actors, not one per GPU (it held the GPUs and ran on their CPU)

    def __init__(self, encoder_dir: str, device: str = "cpu", reverse: bool = False):
        from mtcore.alignment.classifier import load_pair_scorer

        self.scorer = load_pair_scorer(encoder_dir)  # small: runs on the CPU whatever `device` is
        self.reverse = reverse  # the corpus is the classifier's pair the other way round (vi-en for en-vi)

    def __call__(self, batch: dict) -> dict:
        src, tgt = list(batch["src"]), list(batch["tgt"])
        if self.reverse:  # it reads which side is the source (a length ratio, one attention per side)
            src, tgt = tgt, src
        return {"_row": batch["_row"], "classifier": self.scorer.score(src, tgt)}


def actor_pool(actor, rows: int, batch_size: int, num_actors: int, cpus: int, gpus: int) -> tuple[int, dict, str]:
    """(pool size, resources per actor, device) for `actor` over `rows` pairs: one actor per GPU when the cluster has
    GPUs and the actor runs on one (`on_gpu`, true unless it says otherwise), else one per CPU; never more actors than
    batches."""
    if gpus and getattr(actor, "on_gpu", True):
        size, resources, device = min(num_actors or gpus, gpus), {"num_gpus": 1}, "cuda"
    else:
        size, resources, device = max(1, min(num_actors or cpus, cpus)), {"num_cpus": 1}, "cpu"
    return max(1, min(size, -(-rows // batch_size))), resources, device  # no idle actors on small inputs


def map_pairs_ray(table: pa.Table, actor, kwargs: dict, columns: tuple[str, ...], batch_size: int = 1024,
                  num_actors: int = 0) -> dict[str, np.ndarray]:
    """Run `actor(**kwargs, device=...)` over the (src, tgt) pairs of `table` in a Ray Data actor pool (one
    model load per actor; GPUs when the cluster has them); its output `columns`, in input order."""
    import ray

    from mtcore.distributed.cluster import available_cpus, available_gpus, init_ray, map_with_actors

    init_ray()
    size, resources, device = actor_pool(actor, len(table), batch_size, num_actors, available_cpus(), available_gpus())
    rows = pa.table({"_row": pa.array(np.arange(len(table))), "src": table["src"], "tgt": table["tgt"]})
    step = batch_size  # one block per batch, so that every actor of the pool gets work
    blocks = [rows.slice(i, step) for i in range(0, len(rows), step)] or [rows]
    ds = map_with_actors(
        ray.data.from_arrow(blocks),
        actor,
        fn_constructor_kwargs={**kwargs, "device": device},
        compute=ray.data.ActorPoolStrategy(size=size),
        batch_size=batch_size,
        batch_format="numpy",
        **resources,
    )
    parts = list(ds.iter_batches(batch_size=None, batch_format="numpy"))
    order = np.concatenate([p["_row"] for p in parts]) if parts else np.zeros(0, np.int64)
    out = {}
    for name in columns:
        values = np.concatenate([p[name] for p in parts]) if parts else np.zeros((0, 0), np.float32)  # no rows
        column = np.zeros((len(table), *values.shape[1:]), values.dtype)
        column[order] = values
        out[name] = column
    return out


# --------------------------------------------------------------------------- scores


def misaligned_partners(origins: list[str] | None, n: int, seed: int) -> np.ndarray:
    """For each row, another row of the same origin (a derangement inside each origin); rows alone in
    their origin get a random other row. These pairs are wrong by construction."""
    rng = np.random.default_rng(seed)
    partner = np.full(n, -1, dtype=np.int64)
    groups: dict[str, list[int]] = {}
    for i, o in enumerate(origins if origins is not None else [""] * n):
        groups.setdefault(o, []).append(i)
    for rows in groups.values():
        if len(rows) >= 2:
            rows = np.array(rows)
            shift = rng.integers(1, len(rows))  # a cyclic shift of a random order: no fixed points
            order = rng.permutation(rows)
            partner[order] = np.roll(order, -shift)
    alone = np.flatnonzero(partner < 0)
    if len(alone) and n >= 2:
        other = rng.integers(0, n - 1, size=len(alone))
        partner[alone] = other + (other >= alone)
    partner[partner < 0] = 0  # n == 1: nothing to pair with
    return partner


@dataclass
class PairScores:
    """Scores of the real pairs, of random misaligned ones (same sources, other targets) and of
    near-miss ones (`near_*`, one entry per near-miss pair, its kind in `near_kind`)."""

    cosine: np.ndarray
    margin: np.ndarray
    mis_cosine: np.ndarray
    mis_margin: np.ndarray
    near_cosine: np.ndarray = field(default_factory=lambda: np.zeros(0))
    near_margin: np.ndarray = field(default_factory=lambda: np.zeros(0))
    near_kind: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=object))
    dual_xent: np.ndarray = field(default_factory=lambda: np.zeros(0))  # only with score "dual_xent"
    mis_dual_xent: np.ndarray = field(default_factory=lambda: np.zeros(0))
    near_dual_xent: np.ndarray = field(default_factory=lambda: np.zeros(0))
    classifier: np.ndarray = field(default_factory=lambda: np.zeros(0))  # only with score "classifier"
    mis_classifier: np.ndarray = field(default_factory=lambda: np.zeros(0))
    near_classifier: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # the known-good reference pairs' scores (calibration "reference") and where they came from
    ref_cosine: np.ndarray = field(default_factory=lambda: np.zeros(0))
    ref_margin: np.ndarray = field(default_factory=lambda: np.zeros(0))
    ref_dual_xent: np.ndarray = field(default_factory=lambda: np.zeros(0))
    ref_classifier: np.ndarray = field(default_factory=lambda: np.zeros(0))
    ref_source: str = ""
    # length bands (`calibration.length_bands`) of the real pairs and of the reference pairs, and the reference's catalogs
    band: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    mis_band: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # the scored (distinct) rows'
    near_band: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    ref_band: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    ref_group: np.ndarray | None = None

    def real(self, name: str) -> np.ndarray:
        return getattr(self, name)

    def misaligned(self, name: str) -> np.ndarray:
        return getattr(self, f"mis_{name}")

    def near_miss(self, name: str) -> np.ndarray:
        return getattr(self, f"near_{name}")

    def reference(self, name: str) -> np.ndarray:
        return getattr(self, f"ref_{name}")

    def for_rows(self, index: np.ndarray) -> PairScores:
        """These scores with the real pairs' taken at `index` (a row's copy shares its score)."""
        real = {name: getattr(self, name)[index] for name in ("cosine", "margin", "dual_xent", "classifier", "band")
                if len(getattr(self, name))}
        return replace(self, **real)


def score_pairs(
    x: np.ndarray,
    y: np.ndarray,
    origins: list[str] | None,
    k: int = DEFAULT_K,
    seed: int = 0,
    window: int = MARGIN_WINDOW,
    *,
    src: list[str] | None = None,
    tgt: list[str] | None = None,
    encode=None,
    synthetic_rows: int = 4000,
    near: negatives.NearMisses | None = None,
) -> PairScores:
    """Scores of every pair and of its misaligned variants.

    With `src`/`tgt`, near misses are scored too: fuzzy and neighbour partners (other rows'
    targets, no encoding), and, with `encode` (texts -> unit rows), partial and swapped targets
    for up to `synthetic_rows` random rows. A synthetic target's margin uses the original
    target's neighbourhood (it lives in the same catalog). `near`: those pairs, made already.
    """
    x_knn, y_knn = np.empty(len(x)), np.empty(len(x))
    order = np.argsort(np.asarray(origins), kind="stable") if origins is not None and len(x) > window else np.arange(len(x))
    x_knn[order], y_knn[order] = windowed_knn(x[order], y[order], k, window)  # windows hold whole catalogs
    cos = cosine(x, y)
    partner = misaligned_partners(origins, len(x), seed)
    mis_cos = cosine(x, y[partner])
    scores = PairScores(cos, ratio_margin(cos, x_knn, y_knn), mis_cos, ratio_margin(mis_cos, x_knn, y_knn[partner]))
    if near is None and (src is None or tgt is None):
        return scores
    if near is None:
        near = negatives.near_miss_pairs(src, tgt, origins, seed, synthetic_rows if encode is not None else 0)
    if len(near):
        made = near.partner < 0
        yc = np.empty((len(near), y.shape[1]), dtype=y.dtype)
        yc[~made] = y[near.partner[~made]]
        if made.any():
            yc[made] = encode([near.targets[i] for i in np.flatnonzero(made)])
        ncos = cosine(x[near.rows], yc)
        scores.near_cosine, scores.near_margin = ncos, ratio_margin(ncos, x_knn[near.rows], y_knn[near.context_rows])
        scores.near_kind = np.asarray(near.kinds, dtype=object)
    return scores


def calibrate(scores: PairScores, cfg: FilterConfig) -> dict:
    """The threshold and how it was chosen, for `report.json` and MLflow."""
    real, mis, near = scores.real(cfg.score), scores.misaligned(cfg.score), scores.near_miss(cfg.score)
    ref = scores.reference(cfg.score)
    out = {"score": cfg.score}
    if cfg.threshold != "auto":
        t, method, share, est_fr = float(cfg.threshold), "given", near_miss_share(real, near) if len(near) else misaligned_share(real, mis), None
    elif cfg.calibration == "reference" and len(ref):
        fr = cfg.max_false_reject
        by_length = (cfg.reference_rule == "budget" and len(scores.band) == len(real) and len(scores.ref_band) == len(ref)
                     and np.bincount(scores.ref_band).max() >= MIN_BAND_REFERENCE)
        if by_length:
            bands, share, est_fr, t_random = length_band_thresholds(real, mis, ref, scores.band, scores.ref_band,
                                                                   scores.ref_group, fr)
            t = float(bands.min())
            out["thresholds_by_length"] = {name: round(float(v), 6) for name, v in zip(BAND_NAMES, bands)}
            out["reference_pairs_by_length"] = {name: int((scores.ref_band == b).sum()) for b, name in enumerate(BAND_NAMES)}
            how = (f"in each band of source length ({', '.join(BAND_NAMES)}), the highest threshold rejecting at most "
                   f"{fr:g} of that band's (budget; the lowest of the thresholds is `threshold`)")
        else:
            t, share, est_fr, t_random = reference_threshold(real, mis, ref, fr, cfg.reference_rule)
            how = (f"the highest threshold rejecting at most {fr:g} of them ({cfg.reference_rule})" if cfg.reference_rule != "fewest_errors"
                   else f"fewest expected errors against them, at most {fr:g} of them rejected (fewest_errors)")
            if cfg.reference_rule == "budget":
                how += f"; one threshold for every length: no band of source length has {MIN_BAND_REFERENCE} of them"
        method = (f"reference: {len(ref)} known-good pairs' scores as the good distribution ({scores.ref_source}), {how}; "
                  "noise share = corpus below it beyond the expected false rejects (a lower bound)")
        if (by_length and (bands == t_random).all()) or (not by_length and t == t_random):
            method += "; raised to the random-pair rule's threshold (floor)"
        elif by_length and (bands == t_random).any():
            method += "; some bands raised to the random-pair rule's threshold (floor)"
        out |= {"threshold_random_rule": round(t_random, 6) if np.isfinite(t_random) else None,
                "reference_pairs": len(ref), "reference_median": round(float(np.median(ref)), 4),
                "reference_vs_random_auc": round(separation(ref, mis), 4) if len(mis) else None}
    elif cfg.calibration in ("near_miss", "reference") and len(near):
        t, share, est_fr, t_random = near_miss_threshold(real, mis, near, cfg.max_false_reject)
        method = "near_miss (no reference pairs)" if cfg.calibration == "reference" else "near_miss"
        method += f": highest threshold with estimated false rejects ≤ {cfg.max_false_reject:g} (good-score CDF = corpus − π·near-miss)"
        out["threshold_random_rule"] = round(t_random, 6)
        out["corpus_vs_random_auc"] = round(separation(real, mis), 4) if len(mis) and len(real) else None
        if t == t_random:
            method += "; raised to the random-pair rule's threshold (floor)"
        elif est_fr is not None and t < false_reject_threshold(real, near, cfg.max_false_reject, share)[0]:
            method += f"; capped at {cfg.max_false_reject:g} of the corpus beyond the random-pair rule"
    else:
        t, share, est_fr = auto_threshold(real, mis), misaligned_share(real, mis), None
        method = "random: min expected errors, random same-origin pairs as the bad-score distribution"
    by_length = out.get("thresholds_by_length")
    row_t, mis_t, near_t = (per_row(by_length, t, band, len(values))
                            for values, band in ((real, scores.band), (mis, scores.mis_band), (near, scores.near_band)))
    out |= {
        "method": method,
        "threshold": float(t),
        "estimated_misaligned_share": round(share, 4),
        "estimated_false_reject": round(est_fr, 4) if est_fr is not None else None,
        "max_false_reject": cfg.max_false_reject,
        "reference_rule": cfg.reference_rule if cfg.threshold == "auto" and cfg.calibration == "reference" and len(ref) else None,
        "misaligned_pairs": "random: targets of other rows of the same origin",
        "misaligned_below_threshold": round(float((mis < mis_t).mean()), 4) if len(mis) else None,
        "near_miss_pairs": {str(k): int(c) for k, c in zip(*np.unique(scores.near_kind, return_counts=True))} if len(near) else {},
        "near_miss_below_threshold": round(float((near < near_t).mean()), 4) if len(near) else None,
        "real_below_threshold": round(float((real < row_t).mean()), 4) if len(real) else None,
        "real_median": round(float(np.median(real)), 4) if len(real) else None,
        "misaligned_median": round(float(np.median(mis)), 4) if len(mis) else None,
        "near_miss_median": round(float(np.median(near)), 4) if len(near) else None,
    }
    return out


# --------------------------------------------------------------------------- the stage


@dataclass
class FilterResult:
    output: Path
    report: dict
    skipped: bool = False
    threshold: float | None = None
    kept: pa.Table | None = field(default=None, repr=False)
    rejects: pa.Table | None = field(default=None, repr=False)


def per_row(by_length: dict | None, threshold: float, band: np.ndarray, n: int) -> np.ndarray:
    """The threshold of each of n pairs: its length band's where there are bands (and n of them), else the one."""
    if by_length and len(band) == n:
        return np.asarray(list(by_length.values()), dtype=np.float64)[band]
    return np.full(n, float(threshold))


def row_thresholds(scores: PairScores, calibration: dict) -> np.ndarray:
    """Each real pair's threshold under a `calibrate` result."""
    n = len(scores.band) if len(scores.band) else len(scores.cosine)
    return per_row(calibration.get("thresholds_by_length"), calibration["threshold"], scores.band, n)


def outputs_exist(output: Path) -> bool:
    return (output / "report.json").is_file() and (output / "kept").is_dir() and (output / "rejects").is_dir()


def decide(table: pa.Table, scores: PairScores, cfg: FilterConfig) -> tuple[pa.Table, pa.Table, float]:
    """(kept, rejects, threshold) from scores computed once."""
    from mtcore.data.ledger import rejects_table

    values = scores.real(cfg.score)
    calibration = calibrate(scores, cfg)
    threshold, row_t = calibration["threshold"], row_thresholds(scores, calibration)
    keep = values >= row_t
    rej = np.flatnonzero(~keep)
    band = (lambda i: f" ({BAND_NAMES[scores.band[i]]})") if "thresholds_by_length" in calibration else (lambda i: "")
    sub = table.take(pa.array(rej, pa.int64()))
    rejects = rejects_table(
        sub["src"].to_pylist(),
        sub["tgt"].to_pylist(),
        sub["origin"].to_pylist() if "origin" in sub.column_names else [""] * len(sub),
        sub["id"].to_pylist() if "id" in sub.column_names else [str(i) for i in rej],
        stage=STAGE,
        reason=REASONS[cfg.score],
        scores=[float(values[i]) for i in rej],
        details=[f"{cfg.score} {values[i]:.3f} < threshold {row_t[i]:.3f}{band(i)}" for i in rej],
    )
    return table.filter(pa.array(keep)), rejects, threshold


def score_corpus(table: pa.Table, cfg: FilterConfig, *, use_ray: bool = True) -> tuple[PairScores, dict]:
    """Encode and score every pair; returns the scores and timings."""
    from mtcore.embedding import load_encoder, resolve_encoder

    t0 = time.perf_counter()
    spec = resolve_encoder(cfg.encoder)
    encoder = None
    if use_ray:
        x, y = embed_pairs_ray(table, spec, cfg.batch_size, cfg.num_actors)
    else:
        encoder = load_encoder(spec)
        x, y = embed_pairs(table, encoder, cfg.batch_size)
    t_enc = time.perf_counter() - t0
    origins = table["origin"].to_pylist() if "origin" in table.column_names else None
    want_reference = cfg.threshold == "auto" and cfg.calibration == "reference"
    reference, ref_source = reference_pairs(cfg, spec) if want_reference else (None, "")
    near = cfg.calibration == "near_miss" or (want_reference and reference is None)

    def encode(texts: list[str]) -> np.ndarray:  # synthetic targets, reference pairs: in process, one more model load at most
        nonlocal encoder
        encoder = encoder or load_encoder(spec)
        return encoder.encode(texts, batch_size=cfg.batch_size)

    src, tgt = table["src"].to_pylist(), table["tgt"].to_pylist()
    pairs = negatives.near_miss_pairs(src, tgt, origins, cfg.seed, cfg.synthetic_rows) if near else None
    scores = score_pairs(x, y, origins, cfg.k, cfg.seed, cfg.margin_window, encode=encode, near=pairs)
    scores.band = scores.mis_band = length_bands(src)  # a random misaligned pair keeps its row's source
    scores.near_band = scores.band[pairs.rows] if pairs is not None and len(pairs) else np.zeros(0, dtype=np.int64)
    if reference is not None:
        scores.ref_cosine, scores.ref_margin = reference_in_corpus(reference, src, tgt, scores, x, y, encode, cfg)
        scores.ref_source = ref_source
        scores.ref_band = length_bands(reference["src"].to_pylist())
        if not cfg.reference:  # the encoder's own: whole held-out catalogs (a user's file may be any sample)
            scores.ref_group = np.asarray(reference["origin"].to_pylist(), dtype=object)
    timing = {"encode_seconds": round(t_enc, 2)}
    if cfg.score in PAIR_MODELS:
        t_model = time.perf_counter()
        if cfg.score == "dual_xent":
            actor, kwargs = DualXentPairs, {"forward": cfg.nmt_forward, "reverse": cfg.nmt_reverse}
        else:
            classifier_for(spec)  # trained here on first use, before the actors load it
            actor, kwargs = ClassifierPairs, {"encoder_dir": spec, "reverse": reads_reversed(spec, cfg.langs)}
            warn_cut_pairs(spec, src, tgt)
        values = pair_model_scores(actor, kwargs, cfg.score, src, tgt, misaligned_partners(origins, len(src), cfg.seed),
                                   pairs, cfg, use_ray, reference)
        for prefix, v in zip(("", "mis_", "near_", "ref_"), values):
            setattr(scores, prefix + cfg.score, v)
        timing[f"{cfg.score}_seconds"] = round(time.perf_counter() - t_model, 2)
    t_all = time.perf_counter() - t0
    timing["score_seconds"] = round(t_all - t_enc, 2)
    timing["pairs_per_second"] = round(len(table) / t_all, 1) if t_all > 0 else None
    return scores, timing


def warn_cut_pairs(encoder_dir: str, src: list[str], tgt: list[str]) -> None:
    from mtcore.alignment.classifier import pairs_cut

    cut, max_len = pairs_cut(encoder_dir, src, tgt)
    if cut:
        log.warning("%d of %d pairs (%.1f %%) have a side longer than the classifier's %d pieces: it judges them by "
                    "their first %d (a translation that drops the end of a long sentence goes unseen; the margin "
                    "reads them whole)", cut, len(src), 100 * cut / max(1, len(src)), max_len, max_len)


def pair_model_scores(actor, kwargs: dict, column: str, src: list[str], tgt: list[str], partner: np.ndarray,
                      near: negatives.NearMisses | None, cfg: FilterConfig, use_ray: bool,
                      reference: pa.Table | None = None) -> tuple[np.ndarray, ...]:
    """A model's score (`actor(**kwargs)` returns `column`) of the corpus's pairs, of the random misaligned
    ones (`partner`), of the near misses and of the reference pairs: one pass over all of them, in an actor
    pool (or in process)."""
    near_src = [src[i] for i in near.rows] if near is not None else []
    near_tgt = list(near.targets) if near is not None else []
    ref_src = reference["src"].to_pylist() if reference is not None else []
    ref_tgt = reference["tgt"].to_pylist() if reference is not None else []
    all_src = src + src + near_src + ref_src
    all_tgt = tgt + [tgt[j] for j in partner] + near_tgt + ref_tgt
    if use_ray:
        table = pa.table({"src": pa.array(all_src, pa.string()), "tgt": pa.array(all_tgt, pa.string())})
        values = map_pairs_ray(table, actor, kwargs, (column,), cfg.batch_size, cfg.num_actors)[column].reshape(-1)
    else:
        values = actor(**kwargs)({"_row": None, "src": all_src, "tgt": all_tgt})[column]
    n, m = len(src), len(near_src)
    return values[:n], values[n:2 * n], values[2 * n:2 * n + m], values[2 * n + m:]


def reference_scores(x: np.ndarray, y: np.ndarray, xr: np.ndarray, yr: np.ndarray, k: int = DEFAULT_K,
                     window: int = MARGIN_WINDOW, seed: int = 0, groups: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(cosine, margin) of the reference pairs (xr, yr) as if each were one more row of the corpus (x, y).

    The margin divides by the mean similarity of a sentence's nearest neighbours, which grows with the
    size and density of the corpus it is searched in (measured: the median margin of the same kind of
    pairs is 1.24 in 3,400 rows and 1.62 in 200); scored in their own neighbourhood, the reference would
    not be on the corpus's scale. Above `window` rows the corpus's rows find their neighbours in windows
    of ceil(n / ceil(n / window)) rows; the reference pairs, in a random sample of that size.

    `groups` (each reference pair's catalog): a corpus row's window holds its own catalog, whose messages
    ("Cannot open file" beside "Cannot read file") are its nearest neighbours and lower its margin. So a
    reference pair is scored among its own catalog's other pairs plus corpus rows up to that size (measured,
    pairs of 8+ words: without them the reference's 2 % quantile lost 9-17 % of the good pairs of held-out
    catalogs, with them 1-9 %; benchmarks/RESULTS.md, issue 21)."""
    cos = cosine(xr, yr)
    n = len(x)
    size = -(-n // max(1, -(-n // window)))  # the corpus's window size (windowed_knn)
    rng = np.random.default_rng(seed)
    if groups is None:
        rows = np.sort(rng.choice(n, size, replace=False)) if n > size else np.arange(n)
        x_knn = knn_mean_similarity(xr, y[rows], k, own=cos)
        y_knn = knn_mean_similarity(yr, x[rows], k, own=cos)
        return cos, ratio_margin(cos, x_knn, y_knn)
    x_knn, y_knn = np.empty(len(xr)), np.empty(len(xr))
    names, group_of = np.unique(np.asarray(groups, dtype=object).astype(str), return_inverse=True)
    for g in range(len(names)):
        mine = np.flatnonzero(group_of == g)
        take = min(n, max(0, size - len(mine)))  # the catalog and the corpus rows fill one window together
        rows = np.sort(rng.choice(n, take, replace=False)) if take < n else np.arange(n)
        for queries, siblings, corpus_keys, out in ((xr, yr, y, x_knn), (yr, xr, x, y_knn)):
            keys = np.concatenate([corpus_keys[rows], siblings[mine]])  # its own partner is among its siblings
            for start in range(0, len(mine), 512):
                part = mine[start:start + 512]
                sims = queries[part] @ keys.T
                kk = max(1, min(k, sims.shape[1]))
                out[part] = np.partition(sims, sims.shape[1] - kk, axis=1)[:, -kk:].mean(axis=1)
    return cos, ratio_margin(cos, x_knn, y_knn)


def reference_in_corpus(reference: pa.Table, src: list[str], tgt: list[str], scores: PairScores, x: np.ndarray,
                        y: np.ndarray, encode, cfg: FilterConfig) -> tuple[np.ndarray, np.ndarray]:
    """The reference pairs' (cosine, margin): a pair that is also a row of the corpus (the main job filters
    the corpus the built-in encoder's reference came from) has that row's scores, the others are scored
    by `reference_scores` (counting an exact copy among the neighbours would lower their margin)."""
    row_of = {(a, b): i for i, (a, b) in reversed(list(enumerate(zip(src, tgt))))}
    r_src, r_tgt = reference["src"].to_pylist(), reference["tgt"].to_pylist()
    rows = np.array([row_of.get((a, b), -1) for a, b in zip(r_src, r_tgt)], dtype=np.int64)
    cos, margin = np.empty(len(rows)), np.empty(len(rows))
    inside = rows >= 0
    cos[inside], margin[inside] = scores.cosine[rows[inside]], scores.margin[rows[inside]]
    out = np.flatnonzero(~inside)
    if len(out):
        xr, yr = encode([r_src[i] for i in out]), encode([r_tgt[i] for i in out])
        # the encoder's own reference is whole held-out catalogs, each scored beside its other pairs; a user's file may be any sample
        groups = None if cfg.reference else np.asarray(reference["origin"].to_pylist(), dtype=object)[out]
        cos[out], margin[out] = reference_scores(x, y, xr, yr, cfg.k, cfg.margin_window, cfg.seed, groups)
    return cos, margin


def encoder_reference(encoder_dir: Path) -> int:
    """The number of reference pairs an encoder directory holds (0 when it has none); damaged: an error naming it."""
    import pyarrow.parquet as pq

    from mtcore.embedding.encoder import REFERENCE_FILE

    path = encoder_dir / REFERENCE_FILE
    if not path.is_file():
        return 0
    try:
        return pq.ParquetFile(path).metadata.num_rows
    except (pa.ArrowInvalid, OSError) as err:
        raise FilterError(f"{path}: damaged ({' '.join(str(err).split())[:100]}); train the encoder again, or "
                          f"pass pairs you trust with --reference FILE") from None


def reads_reversed(encoder_dir: str, langs: tuple[str, str]) -> bool:
    """Whether a corpus of `langs` is the pair the encoder directory's models were trained on, turned round."""
    from mtcore.embedding.encoder import encoder_languages, is_reverse_pair

    return is_reverse_pair(langs, encoder_languages(encoder_dir) or ("en", "vi"))  # built-in: en-vi, recorded or not


def reference_pairs(cfg: FilterConfig, spec: str) -> tuple[pa.Table | None, str]:
    """(known-good pairs, where from) for calibration "reference": `cfg.reference`, else the encoder
    directory's `reference.parquet`; (None, "") when there are none (the caller falls back to near misses)."""

    from mtcore.data.corpus import read_corpus
    from mtcore.embedding.encoder import MIN_REFERENCE_PAIRS, REFERENCE_FILE, read_reference

    path = Path(cfg.reference) if cfg.reference else Path(spec) / REFERENCE_FILE
    if not cfg.reference and not path.exists():  # a user's file may be a Moses prefix (FILE.en + FILE.vi): read_corpus decides
        log.warning("no reference pairs (%s): calibrating on near misses made from the corpus instead%s", path, _rule_unused(cfg))
        return None, ""
    table = (read_corpus(path, src_lang=cfg.langs[0], tgt_lang=cfg.langs[1]) if cfg.reference
             else read_reference(path.parent, cfg.langs) if encoder_reference(path.parent) else None)  # may be empty
    if table is not None and cfg.reference:  # a user's file: an empty side is no known-good pair
        table, empty = split_empty_sides(table)
        if len(empty):
            log.warning("--reference %s: %d pair(s) with an empty side left out of the known-good pairs", path, len(empty))
    if table is None or len(table) < MIN_REFERENCE_PAIRS:
        message = f"{path}: {0 if table is None else len(table)} reference pairs; at least {MIN_REFERENCE_PAIRS} are needed"
        if cfg.reference:
            raise FilterError(message)
        log.warning("%s: calibrating on near misses made from the corpus instead%s", message, _rule_unused(cfg))
        return None, ""
    return table, str(path)


def _rule_unused(cfg: FilterConfig) -> str:
    """What the fallback to near misses leaves out: a reference rule the user chose (the default cannot be told apart)."""
    if cfg.reference_rule == "budget":
        return ""
    return f"; --reference-rule {cfg.reference_rule} is not used (it needs known-good pairs: pass --reference FILE)"


def check_encoder_languages(spec: str, langs: tuple[str, str]) -> None:
    """An mtcore encoder scores the language pair it was trained on: the built-in one en-vi, one of
    `train_encoder.py --langs` its pair. Another pair's sentences are mostly unknown pieces to it, and its
    scores rank nothing. External encoders (LaBSE) are multilingual and not checked."""
    from mtcore.embedding import BUILTIN
    from mtcore.embedding.encoder import encoder_languages, is_encoder_dir

    trained = ("en", "vi") if spec == BUILTIN else encoder_languages(spec) if is_encoder_dir(spec) else None
    if trained is not None and set(trained) != set(langs):
        raise FilterError(f"--encoder {spec} was trained on {'-'.join(trained)} pairs, and the corpus is {'-'.join(langs)}; "
                          f"train one on {'-'.join(langs)} pairs (python pipelines/train_encoder.py --corpus FILE "
                          f"--langs {'-'.join(langs)} --output DIR), or pass a multilingual sentence-transformers model")


def split_empty_sides(table: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(pairs to score, rejects `empty_side`): an empty sentence has no meaning to compare, yet two empty sides
    encode alike (cosine 1.0, kept) and one empty side can pass a threshold. The cleaning stage rejects them; this
    stage also reads users' corpora directly."""
    import pyarrow.compute as pc

    from mtcore.data.ledger import rejects_table

    no_src = pc.equal(pc.utf8_trim_whitespace(table["src"]), "").to_numpy(zero_copy_only=False)
    no_tgt = pc.equal(pc.utf8_trim_whitespace(table["tgt"]), "").to_numpy(zero_copy_only=False)
    empty = no_src | no_tgt
    sub = table.filter(pa.array(empty))
    what = ["both sides empty" if a and b else "empty source" if a else "empty target"
            for a, b in zip(no_src[empty], no_tgt[empty])]
    rejects = rejects_table(sub["src"].to_pylist(), sub["tgt"].to_pylist(),
                            sub["origin"].to_pylist() if "origin" in sub.column_names else [""] * len(sub),
                            sub["id"].to_pylist(), stage=STAGE, reason="empty_side", details=what)
    return table.filter(pa.array(~empty)), rejects


def unique_pairs(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(row of each distinct (src, tgt) pair's first copy, each row's index among those)."""
    first: dict[tuple[str, str], int] = {}
    inverse = np.fromiter((first.setdefault(pair, len(first)) for pair in zip(table["src"].to_pylist(), table["tgt"].to_pylist())),
                          dtype=np.int64, count=len(table))
    rows = np.zeros(len(first), dtype=np.int64)
    rows[inverse[::-1]] = np.arange(len(table) - 1, -1, -1)  # the first row of each pair (the last write wins)
    return rows, inverse


def filter_table(table: pa.Table, cfg: FilterConfig, *, use_ray: bool = True):
    """In memory: (kept, rejects, threshold, scores, timing).

    Each distinct pair is scored once, and its copies share its score: copies among a pair's own nearest
    neighbours pulled its margin to 1.0 (50 copies of a good pair were rejected as misaligned). Mining
    setups (LASER, Artetxe & Schwenk 2019) deduplicate before the margin; this stage reads users' corpora as
    they are, and the cleaning stage's dedupe is for it to report.
    """
    rows, inverse = unique_pairs(table)
    if len(rows) < len(table):
        scores, timing = score_corpus(table.take(pa.array(rows)), cfg, use_ray=use_ray)
        scores = scores.for_rows(inverse)
    else:
        scores, timing = score_corpus(table, cfg, use_ray=use_ray)
    kept, rejects, threshold = decide(table, scores, cfg)
    warn_far_from_reference(scores, cfg, len(rejects) / max(len(table), 1))
    return kept, rejects, threshold, scores, timing


def warn_far_from_reference(scores: PairScores, cfg: FilterConfig, rejected: float) -> None:
    """A corpus that scores far below the known-good reference pairs and loses much of itself to their threshold is
    another domain, or mostly noise: said, with what to do. (Far below alone fired on clean single-catalog corpora
    that lost 1-2 % of their pairs: their messages are one another's near neighbours.)"""
    ref, real = scores.reference(cfg.score), scores.real(cfg.score)
    if len(ref) and len(real) and np.median(real) < np.quantile(ref, 0.1) and rejected > FAR_REJECT_SHARE:
        log.warning("the corpus scores far below the reference pairs (median %.3f < their 10 %% quantile %.3f) and the "
                    "threshold rejects %.0f %% of it: another domain, or mostly noise; if its pairs are mostly good, "
                    "calibrate on this domain (--reference FILE of its known-good pairs, or --calibration near_miss)",
                    np.median(real), np.quantile(ref, 0.1), 100 * rejected)


def filter_corpus(
    input_path: str | Path, output: str | Path, cfg: FilterConfig | None = None, *, overwrite: bool = False, use_ray: bool = True, track: bool = True
) -> FilterResult:
    """The align-filter stage: read, score, decide, write `kept/`, `rejects/`, `report.json`, histogram, MLflow.

    OUTPUT is a `runs.Stage` of the settings, the corpus and the encoder's contents: reused when they
    are the same, refused (unless `overwrite`) when they are not, written whole or not at all."""
    from mtcore.data.corpus import check_exists, read_corpus, write_parquet
    from mtcore.data.ledger import StageReport, write_report
    from mtcore.embedding import check_encoder, resolve_encoder
    from mtcore.runs import Stage, resolve_data

    cfg = cfg or FilterConfig()
    output = checks.output_dir(output)
    # A stage folder counts by the kept/ it gives, not by its text exports or plots: `clean --format tsv` on a
    # reused stage adds files there, and this stage was then refused as made from another input.
    input_path = resolve_data(input_path)[0]
    check_exists(input_path, *cfg.langs)  # before the encoder, which may have to be trained
    if cfg.score == "classifier" and str(cfg.encoder) != "builtin":
        classifier_for(str(cfg.encoder))  # it reads an mtcore encoder's pieces: said first, whatever else is wrong
    check_encoder(str(cfg.encoder))  # a bad encoder named now, not from inside a Ray actor
    check_encoder_languages(str(cfg.encoder), cfg.langs)  # before the built-in one is trained for minutes
    encoder = resolve_encoder(str(cfg.encoder))  # the built-in encoder is trained here on first use
    inputs = {"corpus": Path(input_path).absolute()}
    if Path(encoder).is_dir():
        inputs["encoder"] = Path(encoder).absolute()
        from mtcore.data.paths import same_file
        from mtcore.embedding.encoder import REFERENCE_FILE

        if cfg.reference and same_file(resolve_data(cfg.reference)[0], Path(encoder) / REFERENCE_FILE):
            cfg = replace(cfg, reference="")  # the encoder's own reference, named: the default, and the same stage
    if cfg.reference:  # other known-good pairs are another threshold; a stage folder counts by its kept/ pairs
        inputs["reference"] = Path(resolve_data(cfg.reference)[0]).absolute()
    elif Path(encoder).is_dir():
        encoder_reference(Path(encoder))  # a damaged one named now, not after the corpus was encoded
    if cfg.score == "dual_xent":  # a retrained model is another filter
        inputs |= {"nmt_forward": Path(cfg.nmt_forward).absolute(), "nmt_reverse": Path(cfg.nmt_reverse).absolute()}
    if cfg.score == "classifier":
        inputs["classifier"] = classifier_for(encoder).absolute()
    # Paths counted as inputs (by their contents) are not settings: a moved encoder is the same filter.
    settings = {k: v for k, v in _jsonable(asdict(cfg)).items()
                if not (k in ("reference", "nmt_forward", "nmt_reverse") and v) and not (k == "encoder" and "encoder" in inputs)
                and not (k == "langs" and tuple(v) == ("en", "vi"))}  # an en-vi stage made before --langs is the same
    stage = Stage(output.absolute(), STAGE, settings=settings, inputs=inputs,
                  code=ALIGNMENT_CODE + (("mtcore.nmt",) if cfg.score == "dual_xent" else ()),
                  languages=cfg.langs, extras=("kept.*",))  # --format tsv|txt exports
    if stage.reuse(overwrite) is not None:
        return FilterResult(output, json.loads((output / "report.json").read_text()), skipped=True)
    table = read_corpus(input_path, src_lang=cfg.langs[0], tgt_lang=cfg.langs[1])
    scored, empty = split_empty_sides(table)
    if not len(scored):
        raise FilterError(f"{input_path}: every pair has an empty side; nothing to score")
    distinct = len(unique_pairs(scored)[0])
    copies = int(pc.sum(pc.equal(pc.utf8_lower(scored["src"]), pc.utf8_lower(scored["tgt"]))).as_py() or 0)
    if copies > COPY_SHARE * len(scored):  # an embedding places a copy next to itself: it scores as aligned
        log.warning("%s: %d of %d pairs are copies (target = source), which score as aligned here; names and codes "
                    "are copied on purpose, untranslated text is not: pipelines/clean.py's untranslated rule rejects the "
                    "copies that are not names (a cleaned corpus keeps the names)", input_path, copies, len(scored))
    # The margin divides by a pair's k nearest neighbours: in a small corpus they are most of it (with one pair every
    # margin is 1.0), and see MIN_MARGIN_PAIRS. A threshold the user gave is on the margin's scale: kept, down to 2k.
    needed = max(MIN_MARGIN_PAIRS, 2 * cfg.k + 1) if cfg.threshold == "auto" else 2 * cfg.k + 1
    if cfg.score == "margin" and distinct < needed and cfg.threshold != "auto":  # cosine would be cut at a margin's value
        raise FilterError(f"{input_path}: {distinct} distinct pairs are too few for the margin (it needs {needed}), and "
                          f"--threshold {cfg.threshold} is on the margin's scale; give --score cosine with a cosine "
                          "threshold, or --threshold auto")
    if cfg.score == "margin" and distinct < needed:
        log.warning("%s: %d distinct pairs are too few for the margin (it needs %d: a small corpus is its own pairs' "
                    "neighbourhood); scored by cosine", input_path, distinct, needed)
        cfg = replace(cfg, score="cosine")
    progress_line(f"scoring {len(scored):,} pairs of {input_path} ({distinct:,} distinct) by {cfg.score}")
    kept, rejects, threshold, scores, timing = filter_table(scored, cfg, use_ray=use_ray)
    calibration = calibrate(scores, cfg)
    judged_rejects = len(rejects)  # by the threshold; the empty-side pairs were never scored
    rejects = pa.concat_tables([empty, rejects])

    with stage.writing() as work:
        write_parquet(kept, work / "kept" / "part-00000.parquet")
        write_parquet(rejects, work / "rejects" / "part-00000.parquet")
        write_parquet(  # the scored pairs (those with an empty side are rejects without a score)
            pa.table({"id": scored["id"], "cosine": scores.cosine, "margin": scores.margin}
                     | ({cfg.score: scores.real(cfg.score)} if cfg.score in PAIR_MODELS else {})
                     | {"kept": pa.array(scores.real(cfg.score) >= row_thresholds(scores, calibration))}),
            work / "scores.parquet",
        )
        real, mis = scores.real(cfg.score), scores.misaligned(cfg.score)
        over = calibration.get("estimated_false_reject")
        if over is not None and over > cfg.max_false_reject and "(floor)" in calibration["method"]:
            log.warning("the random-pair rule's threshold %.3f (the floor) rejects an estimated %.1f %% of the known-good "
                        "pairs, above --max-false-reject %g %%: this encoder tells these pairs from random ones poorly "
                        "(a stronger encoder, or a --threshold of your own)", threshold, 100 * over,
                        100 * cfg.max_false_reject)
        real = scores.real(cfg.score)
        if cfg.threshold != "auto" and len(real) and not real.min() <= threshold <= real.max():
            log.warning("--threshold %g is %s every pair's %s score (%.3f to %.3f): it %s every pair; a threshold of "
                        "another score's scale? (cosine: -1 to 1; margin: about 1 to 2)", threshold,
                        "above" if threshold > real.max() else "below", cfg.score, real.min(), real.max(),
                        "rejects" if threshold > real.max() else "keeps")
        weak = calibration.get("corpus_vs_random_auc") if distinct >= MIN_JUDGED_PAIRS else None
        if weak is not None and weak < MIN_RANDOM_AUC and judged_rejects > FAR_REJECT_SHARE * len(scored):
            # without reference pairs nothing tells a weak encoder from a noisy corpus: both score like random pairs
            log.warning("score %s tells this corpus from random pairs poorly (ROC AUC %.2f < %.2f), and the threshold "
                        "rejects %.0f %% of it: the corpus is mostly misaligned, or the encoder is too weak for it "
                        "(trained on few pairs?); give --reference FILE of known-good pairs, train the encoder on more, "
                        "or pass a --threshold", cfg.score, weak, MIN_RANDOM_AUC, 100 * judged_rejects / len(scored))
        # a random partner of a corpus of one or two distinct pairs is mostly the pair itself: no judgement of the score
        auc = calibration.get("reference_vs_random_auc") if distinct >= MIN_JUDGED_PAIRS else None
        if auc is not None and auc < MIN_RANDOM_AUC:
            log.warning("score %s does not tell the known-good pairs from random ones (ROC AUC %.2f < %.2f): the "
                        "random-pair rule is not applied, and at most --max-false-reject of good pairs are rejected; "
                        "this score is not fit to filter this corpus (train the encoder or classifier longer, or on "
                        "this language pair)", cfg.score, auc, MIN_RANDOM_AUC)
        report = StageReport.from_tables(
            STAGE, len(table), kept, rejects, score=cfg.score, threshold=threshold, encoder=cfg.encoder,
            calibration=calibration, timing=timing,
        )
        write_report(work / "report.json", report, input=str(input_path), config=_jsonable(asdict(cfg)))
        plot_histogram(real, mis, calibration.get("thresholds_by_length") or threshold, cfg.score, work / "histogram.png",
                       scores.near_miss(cfg.score))
        stage.finish({"input": report.input, "kept": report.kept, "threshold": threshold})
    run_id = _track(cfg, report, output, input_path) if track else None
    body = json.loads((output / "report.json").read_text())
    if run_id:
        body["mlflow_run_id"] = run_id
    return FilterResult(output, body, False, threshold, kept, rejects)


def classifier_for(encoder: str) -> Path:
    """The pair classifier of an mtcore encoder directory (the built-in one's is trained on first use)."""
    from mtcore.alignment.classifier import ClassifierError, ensure_classifier
    from mtcore.embedding.encoder import is_encoder_dir

    if not is_encoder_dir(encoder):
        raise FilterError(f"--score classifier reads the pieces of an mtcore encoder (builtin or a directory from "
                          f"pipelines/train_encoder.py), not {encoder!r}")
    try:
        return ensure_classifier(encoder)
    except ClassifierError as err:
        raise FilterError(str(err)) from None


def _jsonable(d: dict) -> dict:
    """Settings as JSON: a language pair stays a list (`recorded_languages` reads it; as the string "('vi', 'en')" a
    vi-en stage's output was read as en-vi by every later stage), paths become strings."""
    def one(v):
        if isinstance(v, (int, float, str, bool, type(None))):
            return v
        if isinstance(v, (tuple, list)):
            return [one(x) for x in v]
        return str(v)

    return {k: one(v) for k, v in d.items()}


def plot_histogram(real: np.ndarray, misaligned: np.ndarray, threshold: float | dict[str, float], score: str, path: Path,
                   near: np.ndarray | None = None) -> Path:
    """The scores' histograms and the threshold (a line per length band where they differ)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    lo = float(min(real.min(initial=0.0), misaligned.min(initial=0.0)))
    hi = float(max(real.max(initial=1.0), misaligned.max(initial=1.0)))
    bins = np.linspace(lo, hi, 60)
    ax.hist(real, bins=bins, alpha=0.6, label=f"corpus pairs (n={len(real):,})", density=True)
    ax.hist(misaligned, bins=bins, alpha=0.6, label="misaligned on purpose (random, same origin)", density=True)
    if near is not None and len(near):
        ax.hist(near, bins=bins, alpha=0.5, label="near misses made from the corpus", density=True)
    for (name, t), style in zip((threshold.items() if isinstance(threshold, dict) else [("", threshold)]), ("--", ":", "-.")):
        ax.axvline(t, color="black", linestyle=style, label=f"threshold {t:.3f}" + (f", {name}" if name else ""))
    ax.set_xlabel(score)
    ax.set_ylabel("density")
    ax.set_title(f"align_filter: {score} of corpus pairs vs deliberately misaligned pairs")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def run_name(cfg: FilterConfig, input_path) -> str:
    """What the run is: input, score, threshold, encoder (`align_filter-clean-kept-margin-auto-builtin`)."""
    path = Path(input_path)
    stem = path.name.split(".")[0] or path.name
    label = f"{path.parent.name}-{stem}" if stem in ("kept", "part-0", "part-00000") else stem
    threshold = cfg.threshold if cfg.threshold == "auto" else f"{float(cfg.threshold):g}"
    return f"align_filter-{label}-{cfg.score}-{threshold}-{Path(str(cfg.encoder)).name}"


def _track(cfg: FilterConfig, report, output: Path, input_path) -> str | None:
    try:
        from mtcore import tracking
        from mtcore.tracking.run import tracked_run

        tags = tracking.standard_tags("pipelines/align_filter.py", input_path)
        params = tracking.flatten(_jsonable(asdict(cfg))) | {"input": str(input_path)}
        with tracked_run(EXPERIMENT, run_name(cfg, input_path), tags=tags, params=params) as run:
            d = report.to_dict()
            cal = d.get("calibration") or {}
            run.log_metrics(
                {"input": d["input"], "kept": d["kept"], "rejected": d["rejected_total"], "threshold": d["threshold"]}
                | {k: v for k, v in d["timing"].items() if isinstance(v, (int, float))}
                | {f"calibration.{k}": v for k, v in cal.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
                | {f"threshold.{name.replace(' ', '_').replace('+', '_or_more')}": v  # MLflow: letters, digits, _ - . /
                   for name, v in (cal.get("thresholds_by_length") or {}).items()}
            )
            run.set_tags({"calibration.method": str(cal.get("method", ""))})
            run.log_artifact(output / "report.json")
            run.log_artifact(output / "histogram.png", "plots")
            return run.run_id
    except Exception as err:  # noqa: BLE001 - never lose a finished stage over the dashboard
        log.warning("MLflow logging failed: %s", err)
        return None
