"""Alignment quality: encoder retrieval, pair filtering with injected misalignments, document alignment.

Every figure is printed beside an anchor measured in the same run, and as a ratio:

  encoder     retrieval P@1 on 1,000 held-out pairs (data/test.parquet: catalogs never
              trained on), both directions. Anchor: the same architecture and vocabulary,
              untrained (what shared pieces such as %s, names and numbers give for free).
              Goal ≥ 0.90.
  long        pairs with a side over 64 pieces (a sample of the raw corpus), each against its target
              cut to 60–80 % of its words: ROC AUC full vs cut, the encoder reading whole sentences
              vs the anchor, the first 64 pieces (what it read before 2026-11-25).
  near_miss   data/near_miss_dev.parquet (pipelines/build_near_miss_dev.py): held-out catalog pairs with
              ~19 % near misses (outdated translation of the most similar other message, neighbour,
              partial, swapped number/option/name). P / R / F1 of the rejects and false rejects
              (share of correct pairs rejected) for the OLD calibration (random pairs, fewest expected
              errors), the NEW one (near misses made from the corpus, `--max-false-reject`), REF
              (fewest errors against the encoder's held-out known-good catalogs), POOLED (below their
              `--max-false-reject` quantile, one threshold for every length) and BUDGET (the
              default: that quantile in each band of source length, 1 word, 2-3, 4+), cosine and margin, recall per
              kind; the best threshold in hindsight at the same false-reject rate; OpusFilter-style
              offline baselines (re-implemented here: LengthRatioFilter, NonZeroNumeralsFilter,
              TerminalPunctuationFilter with OpusFilter's defaults) and the project's cleaning rules. Goal (issue 21): recall ≥ 0.85 at ≤ 2 % false rejects.
              The same figures on data/outdated_dev.parquet (pipelines/build_outdated_dev.py): real
              outdated translations, msgmerge's fuzzy entries of the packages' own source catalogs
              (the new English beside the translation of the old one), among those catalogs' correct pairs.
              With `--nmt FORWARD REVERSE` (two mtcore checkpoints, en→vi and vi→en): the dual
              conditional cross-entropy score (Junczys-Dowmunt 2018; mtcore/alignment/dual_xent.py),
              calibrated the same two ways on the same kinds of negatives, and its sum with the
              margin (each standardised by the median and MAD of the corpus's own scores).
              Then the noise-share sweep: held-out catalogs with 0–40 % outdated (fuzzy) or shifted
              (neighbour) targets: does each calibration's threshold follow the share?
  filter      clean held-out pairs with 10 % of rows misaligned on purpose, one kind at a time:
                shuffled      target of a random other row
                near_miss     target of another message of the same catalog (random)
                near_miss_hard target of the same-catalog message whose *source* shares the
                              most words with this one ("Cannot open file" ↔ "Cannot read file")
                partial       target cut to 40–60 % of its words (targets of ≥ 6 words)
              precision / recall / F1 of the rejects at `--threshold auto`, cosine and margin.
              Anchor: a length-ratio score (−|log(len_tgt/len_src) − median|) thresholded by
              the same auto rule. Goals: F1 ≥ 0.95 shuffled, ≥ 0.85 near miss.
  documents   synthetic document pairs from held-out pairs in catalog order, with deletions,
              insertions, 2-1 merges and 1-2 splits at known places (5 % each); strict F1
              of the recovered (non-empty) alignments. Anchor: a Gale–Church length-based DP
              (Gale & Church 1993) on the same documents. Goal ≥ 0.90.
              Also: the real Debian New Maintainers' Guide pair (no gold; blocks and time).

              With `--classifier`: the pair classifier (`--score classifier`, mtcore/alignment/classifier.py)
              on the near-miss set, the noise-share sweep and the planted set, each calibration beside
              the best threshold in hindsight.

    python benchmarks/align_quality.py [--encoder builtin] [--n 1000] [--seed 0] [--json out.json] [--nmt FWD REV] [--classifier]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import sys
import time
from collections import Counter
from datetime import date
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mtcore.alignment.calibration import separation
from mtcore.alignment.documents import Block, DocAlignConfig, align_documents, read_document, strict_f1
from mtcore.alignment.filter import (
    MAX_FALSE_REJECT,
    FilterConfig,
    auto_threshold,
    misaligned_partners,
    misaligned_share,
    near_miss_threshold,
    length_band_thresholds,
    length_bands,
    reference_scores,
    reference_threshold,
    score_pairs,
)
from mtcore.data.corpus import read_corpus
from mtcore.embedding import load_encoder
from mtcore.embedding.encoder import DualEncoder, SentenceEncoder
from mtcore.embedding.train import quick_clean, retrieval_accuracy
from mtcore.data.paths import DATA_DIR, DEV, NEAR_MISS_DEV, OUTDATED_DEV, TEST


REFERENCE_COLUMNS = (("ref", "fewest_errors"), ("pooled", "budget_pooled"), ("budget", "budget"))  # column → reference rule


class Reference(NamedTuple):
    """The encoder's known-good pairs, embedded, with their catalogs and length bands (`length_bands`)."""
    x: np.ndarray
    y: np.ndarray
    group: np.ndarray
    band: np.ndarray


def reference_rule(rule: str, real: np.ndarray, mis: np.ndarray, ref: np.ndarray, max_false_reject: float,
                   bands: tuple | None = None) -> tuple[np.ndarray | float, dict, float, float]:
    """(each pair's threshold, what to report of it, π, estimated false rejects) of a reference rule, as the filter
    decides: "budget" by length band where `bands` = (the pairs' bands, the reference's bands, its catalogs)."""
    if rule == "budget" and bands is not None:
        by, share, est, _ = length_band_thresholds(real, mis, ref, bands[0], bands[1], bands[2], max_false_reject)
        return by[bands[0]], {"threshold": round(float(by.min()), 4), "thresholds_by_length": [round(float(v), 4) for v in by]}, share, est
    t, share, est, _ = reference_threshold(real, mis, ref, max_false_reject, rule=rule)
    return t, {"threshold": round(t, 4)}, share, est


def rejected(real: np.ndarray, entry: dict, band: np.ndarray) -> np.ndarray:
    """The pairs a reported calibration (`entry`) rejects."""
    if "thresholds_by_length" in entry:
        return real < np.asarray(entry["thresholds_by_length"])[band]
    return real < entry["threshold"]


def heldout_pairs(n: int, seed: int) -> pa.Table:
    t = quick_clean(read_corpus(TEST))
    t = t.sort_by([("origin", "ascending"), ("id", "ascending")])
    if len(t) > n:
        keep = np.sort(np.random.default_rng(seed).choice(len(t), n, replace=False))
        t = t.take(pa.array(keep))
    return t


# --------------------------------------------------------------------------- encoder


def bench_encoder(enc, table: pa.Table) -> dict:
    src, tgt = table["src"].to_pylist(), table["tgt"].to_pylist()
    ours = retrieval_accuracy(enc, src, tgt)
    untrained = SentenceEncoder(DualEncoder(enc.model.cfg), enc.tokenizer) if isinstance(enc, SentenceEncoder) else None
    anchor = retrieval_accuracy(untrained, src, tgt) if untrained else None
    return {"ours": ours, "anchor_untrained": anchor}


# --------------------------------------------------------------------------- filter


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def inject(table: pa.Table, kind: str, rate: float, rng: np.random.Generator) -> tuple[list[str], np.ndarray]:
    """Targets with `rate` of the rows misaligned in the way `kind` says; returns (targets, bad mask)."""
    src, tgt, origin = table["src"].to_pylist(), list(table["tgt"].to_pylist()), table["origin"].to_pylist()
    n = len(src)
    bad = np.zeros(n, dtype=bool)
    if kind == "partial":
        cands = [i for i in range(n) if len(tgt[i].split()) >= 6]
    else:
        cands = list(range(n))
    chosen = rng.choice(cands, size=min(len(cands), int(rate * n)), replace=False)
    by_origin: dict[str, list[int]] = {}
    for i, o in enumerate(origin):
        by_origin.setdefault(o, []).append(i)
    new = list(tgt)
    for i in chosen:
        if kind == "shuffled":
            j = int(rng.integers(n - 1))
            j += j >= i
        elif kind in ("near_miss", "near_miss_hard"):
            same = [j for j in by_origin[origin[i]] if j != i and tgt[j] != tgt[i]]
            if not same:
                continue
            if kind == "near_miss":
                j = same[int(rng.integers(len(same)))]
            else:
                wi = _words(src[i])
                j = max(same, key=lambda j: (len(wi & _words(src[j])) / max(1, len(wi | _words(src[j]))), -j))
        elif kind == "partial":
            words = tgt[i].split()
            keep = max(1, int(len(words) * rng.uniform(0.4, 0.6)))
            new[i] = " ".join(words[:keep])
            bad[i] = True
            continue
        new[i] = tgt[j]
        bad[i] = True
    return new, bad


def prf(rejected: np.ndarray, bad: np.ndarray) -> dict:
    tp = int((rejected & bad).sum())
    p = tp / max(1, int(rejected.sum()))
    r = tp / max(1, int(bad.sum()))
    fr = int((rejected & ~bad).sum()) / max(1, int((~bad).sum()))
    return {"precision": round(p, 4), "recall": round(r, 4), "f1": round(2 * p * r / (p + r), 4) if p + r else 0.0, "false_reject": round(fr, 4)}


def length_score(src: list[str], tgt: list[str]) -> np.ndarray:
    lr = np.log((np.array([len(t) for t in tgt]) + 1) / (np.array([len(s) for s in src]) + 1))
    return -np.abs(lr - np.median(lr))


def bench_filter(enc, table: pa.Table, seed: int, rate: float = 0.1, max_false_reject: float = MAX_FALSE_REJECT,
                 ref: Reference | None = None) -> dict:
    out = {}
    src = table["src"].to_pylist()
    bands = (length_bands(src), ref.band, ref.group) if ref is not None else None
    x = enc.encode(src)
    origins = table["origin"].to_pylist()
    for kind in ("shuffled", "near_miss", "near_miss_hard", "partial"):
        rng = np.random.default_rng(seed)
        tgt, bad = inject(table, kind, rate, rng)
        y = enc.encode(tgt)
        scores = score_pairs(x, y, origins, FilterConfig().k, seed, src=src, tgt=tgt, encode=enc.encode)
        row = {"injected": int(bad.sum())}
        for name in ("cosine", "margin"):
            real, mis = scores.real(name), scores.misaligned(name)
            t = auto_threshold(real, mis)
            row[name] = prf(real < t, bad) | {"threshold": round(t, 4)}
            t_new, share, _, _ = near_miss_threshold(real, mis, scores.near_miss(name), max_false_reject)
            row[f"{name}_new"] = prf(real < t_new, bad) | {"threshold": round(t_new, 4), "estimated_share": round(share, 4)}
            if ref is not None:
                ref_scores = reference_in(x, y, ref)[name]  # a kNN pass over the corpus: once for both rules
                for key, rule in REFERENCE_COLUMNS:
                    t_ref, shown, share, _ = reference_rule(rule, real, mis, ref_scores, max_false_reject, bands)
                    row[f"{name}_{key}"] = prf(real < t_ref, bad) | shown | {"estimated_share": round(share, 4)}
        ls = length_score(src, tgt)
        partner = misaligned_partners(origins, len(src), seed)
        ls_mis = length_score(src, [tgt[j] for j in partner])
        row["anchor_length"] = prf(ls < auto_threshold(ls, ls_mis), bad)
        out[kind] = row
    return out


def bench_long_sentences(enc, seed: int, sample: int = 60_000) -> dict | None:
    """Pairs with a side over 64 pieces (from a sample of the raw corpus), each against its own target cut to
    its first 60–80 % of words: ROC AUC full vs cut, reading whole sentences (the encoder's `max_pieces`) against
    the anchor, the first 64 pieces (what the encoder read before). None for an external encoder."""
    import mtcore.embedding.encoder as encoder_module
    from mtcore.data.paths import RAW_PARALLEL

    if not isinstance(enc, SentenceEncoder) or not RAW_PARALLEL.exists():
        return None
    t = read_corpus(RAW_PARALLEL).select(["src", "tgt"])
    t = t.take(pa.array(np.random.default_rng(seed + 1).choice(len(t), min(sample, len(t)), replace=False)))
    src, tgt = t["src"].to_pylist(), t["tgt"].to_pylist()
    lengths = [max(len(a), len(b)) for a, b in zip(enc.tokenizer.encode(src), enc.tokenizer.encode(tgt))]
    rows = [i for i, n in enumerate(lengths) if n > 64]
    rng = np.random.default_rng(seed)
    s, full = [src[i] for i in rows], [tgt[i] for i in rows]
    cut = [" ".join(x.split()[: max(1, int(len(x.split()) * rng.uniform(0.6, 0.8)))]) for x in full]
    out = {"sample": len(t), "long_pairs": len(rows)}
    saved = encoder_module.POOLED_MAX_PIECES
    try:
        for name, cap in (("first_64", 64), ("whole", saved)):
            encoder_module.POOLED_MAX_PIECES = cap
            x, y, c = enc.encode(s), enc.encode(full), enc.encode(cut)
            good, bad = (x * y).sum(1), (x * c).sum(1)
            out[name] = {"roc_auc": round(separation(good, bad), 4), "median_full": round(float(np.median(good)), 4),
                         "median_cut": round(float(np.median(bad)), 4), "same_score": round(float((np.abs(good - bad) < 1e-6).mean()), 4)}
    finally:
        encoder_module.POOLED_MAX_PIECES = saved
    return out


# --------------------------------------------------------------------------- near-miss dev set


def opusfilter_style(src: list[str], tgt: list[str]) -> dict[str, np.ndarray]:
    """Rejections by OpusFilter's LengthRatioFilter (word, 3), NonZeroNumeralsFilter (0.5) and
    TerminalPunctuationFilter (-2), re-implemented from opusfilter/filters.py so they run offline."""
    from difflib import SequenceMatcher

    ws, wt = np.array([max(1, len(a.split())) for a in src]), np.array([max(1, len(b.split())) for b in tgt])
    length = np.maximum(ws, wt) / np.minimum(ws, wt) >= 3
    nums = []
    for a, b in zip(src, tgt):
        da, db = [c for c in a if c.isdigit() and c != "0"], [c for c in b if c.isdigit() and c != "0"]
        nums.append(SequenceMatcher(None, da, db).ratio() < 0.5 if da or db else False)
    punct = []
    for a, b in zip(src, tgt):
        sp, tp = sum(a.count(c) for c in ".?!…"), sum(b.count(c) for c in ".?!…")
        score = abs(sp - tp) + max(0, sp - 1) + max(0, tp - 1)
        punct.append(-math.log(score + 1) < -2)
    out = {"LengthRatioFilter": length, "NonZeroNumeralsFilter": np.array(nums), "TerminalPunctuationFilter": np.array(punct)}
    out["opusfilter_all"] = out["LengthRatioFilter"] | out["NonZeroNumeralsFilter"] | out["TerminalPunctuationFilter"]
    return out


def cleaning_rules(table: pa.Table) -> np.ndarray:
    """Rows that any of the project's default row rules rejects (TestOverlap aside: the dev set is held-out data)."""
    from mtcore.cleaning import load_config
    from mtcore.cleaning.normalize import normalize_table

    cfg = load_config(None)
    norm, _ = normalize_table(table.select(["src", "tgt", "origin", "id"]), cfg.normalize)
    rejected = np.zeros(len(table), bool)
    for rule in cfg.row_rules:
        if rule.name() != "TestOverlap":
            rejected |= ~np.asarray(rule.accept(rule.score(norm)), dtype=bool)
    return rejected


def recall_by_kind(rejected: np.ndarray, kinds: np.ndarray) -> dict[str, float]:
    return {str(k): round(float(rejected[kinds == k].mean()), 4) for k in sorted(set(kinds)) if k != "ok"}


def calibration_figures(real: np.ndarray, bad: np.ndarray, kinds: np.ndarray, max_false_reject: float,
                        mis: np.ndarray | None = None, near: np.ndarray | None = None, ref: np.ndarray | None = None,
                        near_given: bool = True, bands: tuple | None = None) -> dict:
    """AUC and the rejects of one score (higher = better aligned) at the best threshold in hindsight with
    `max_false_reject`, and, given the misaligned and near-miss scores, under the OLD and NEW calibration;
    given the reference (known-good) pairs' scores, under the REF and BUDGET rules (BUDGET: the default)."""
    from sklearn.metrics import roc_auc_score

    good = np.sort(real[~bad])
    t_best = float(good[min(len(good) - 1, int(max_false_reject * len(good)))])
    out = {"roc_auc": round(float(roc_auc_score(bad, -real)), 4) if bad.any() and (~bad).any() else float("nan")}
    if mis is not None:
        t_old = auto_threshold(real, mis)
        out["old"] = prf(real < t_old, bad) | {"threshold": round(t_old, 4), "estimated_share": round(misaligned_share(real, mis), 4), "recall_by_kind": recall_by_kind(real < t_old, kinds)}
        if near_given:
            t_new, share, est, _ = near_miss_threshold(real, mis, near, max_false_reject)
            out["new"] = prf(real < t_new, bad) | {"threshold": round(t_new, 4), "estimated_share": round(share, 4), "estimated_false_reject": round(est, 4), "recall_by_kind": recall_by_kind(real < t_new, kinds)}
        if ref is not None and len(ref):
            for key, rule in REFERENCE_COLUMNS:
                t_ref, shown, share, est = reference_rule(rule, real, mis, ref, max_false_reject, bands)
                out[key] = prf(real < t_ref, bad) | shown | {"estimated_share": round(share, 4), "estimated_false_reject": round(est, 4), "recall_by_kind": recall_by_kind(real < t_ref, kinds)}
    out["hindsight"] = prf(real < t_best, bad) | {"threshold": round(t_best, 4), "recall_by_kind": recall_by_kind(real < t_best, kinds)}
    return out


def bench_near_miss(enc, table: pa.Table, seed: int, max_false_reject: float = MAX_FALSE_REJECT,
                    ref: Reference | None = None) -> dict:
    """OLD vs NEW vs REF calibration on the labelled near-miss dev set, with the baselines."""
    src, tgt, origins = table["src"].to_pylist(), table["tgt"].to_pylist(), table["origin"].to_pylist()
    band = length_bands(src)
    bad = np.asarray(table["label"].to_pylist(), dtype=bool)
    kinds = np.asarray(table["kind"].to_pylist())
    x, y = enc.encode(src), enc.encode(tgt)
    scores = score_pairs(x, y, origins, FilterConfig().k, seed, src=src, tgt=tgt, encode=enc.encode)
    per_kind = lambda rej: recall_by_kind(rej, kinds)  # noqa: E731
    out = {"pairs": len(table), "misaligned": int(bad.sum()), "true_share": round(float(bad.mean()), 4), "max_false_reject": max_false_reject}
    for name in ("cosine", "margin"):
        out[name] = calibration_figures(scores.real(name), bad, kinds, max_false_reject, scores.misaligned(name), scores.near_miss(name),
                                        reference_in(x, y, ref)[name] if ref is not None else None,
                                        bands=(band, ref.band, ref.group) if ref is not None else None)
    rules = cleaning_rules(table)
    base = opusfilter_style(src, tgt) | {"cleaning_rules": rules}
    out["baselines"] = {k: prf(v, bad) | {"recall_by_kind": per_kind(v)} for k, v in base.items()}
    # What the main job does: the cleaning rules, then the filter (default score), OLD vs NEW calibration.
    name = FilterConfig().score
    real = scores.real(name)
    for which in ("old", "new", "ref", "pooled", "budget"):
        if which not in out[name]:
            continue
        rej = rules | rejected(real, out[name][which], band)
        out[f"rules_plus_{name}_{which}"] = prf(rej, bad) | {"recall_by_kind": per_kind(rej)}
    return out


def reference_embeddings(spec: str, enc) -> tuple[Reference | None, int]:
    """The encoder's known-good reference pairs (its held-out catalogs), embedded; (None, 0) without them."""
    from pathlib import Path

    from mtcore.embedding import resolve_encoder
    from mtcore.embedding.encoder import REFERENCE_FILE

    path = Path(resolve_encoder(spec)) / REFERENCE_FILE
    if not path.exists():
        return None, 0
    t = read_corpus(path)
    return embed_reference(t, enc), len(t)


def embed_reference(table: pa.Table, enc) -> Reference:
    src = table["src"].to_pylist()
    return Reference(enc.encode(src), enc.encode(table["tgt"].to_pylist()), np.asarray(table["origin"].to_pylist(), dtype=object),
                     length_bands(src))


def reference_in(x: np.ndarray, y: np.ndarray, ref: Reference) -> dict[str, np.ndarray]:
    """The reference pairs' scores as rows of the corpus (x, y), as the filter computes them (each beside its catalog)."""
    cos, margin = reference_scores(x, y, ref.x, ref.y, FilterConfig().k, groups=ref.group)
    return {"cosine": cos, "margin": margin}


def mix_noise(table: pa.Table, kind: str, share: float, seed: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(targets, bad, kept rows): `share` of the rows given a wrong target of one kind. `fuzzy`: the target of
    the same-catalog message whose source shares the most words (any overlap, as msgmerge's fuzzy matches;
    that message's own pair is dropped, as the old message is gone from a real catalog); `neighbour`: the
    next message's target."""
    from mtcore.alignment import negatives

    src, tgt, origin = table["src"].to_pylist(), table["tgt"].to_pylist(), table["origin"].to_pylist()
    n = len(src)
    part = negatives.fuzzy_partners(src, tgt, origin) if kind == "fuzzy" else negatives.neighbour_partners(tgt, origin)
    new, bad, free, gone = list(tgt), np.zeros(n, bool), np.ones(n, bool), np.zeros(n, bool)
    want = int(share * n)
    for i in np.random.default_rng(seed).permutation(np.flatnonzero(part >= 0)):
        if want <= 0:
            break
        j = int(part[i])
        if not free[i] or not free[j] or tgt[j] == tgt[i]:
            continue
        new[i], bad[i], free[i] = tgt[j], True, False
        if kind == "fuzzy":
            gone[j], free[j] = True, False
        want -= 1
    rows = np.flatnonzero(~gone | bad)
    return [new[i] for i in rows], bad[rows], rows


def bench_noise_share(enc, table: pa.Table, seed: int, max_false_reject: float, ref: Reference | None,
                      shares=(0.0, 0.05, 0.17, 0.4), sizes=(1300, 500)) -> dict:
    """Does the threshold follow the noise share? Held-out catalogs with 0–40 % of outdated (fuzzy) or
    shifted (neighbour) targets; recall and false rejects of every calibration, margin score; the 17 % outdated
    mix also at `sizes` rows (random subsets; no near-miss column there)."""
    out = {}
    for kind in ("fuzzy", "neighbour"):
        for share in shares:
            if share == 0.0 and kind == "neighbour":
                continue
            tgt, bad, rows = mix_noise(table, kind, share, seed)
            sub = table.take(pa.array(rows))
            src, origins = sub["src"].to_pylist(), sub["origin"].to_pylist()
            x, y = enc.encode(src), enc.encode(tgt)
            scores = score_pairs(x, y, origins, FilterConfig().k, seed, src=src, tgt=tgt, encode=enc.encode)
            kinds = np.where(bad, kind, "ok")
            band = length_bands(src)
            c = calibration_figures(scores.real("margin"), bad, kinds, max_false_reject, scores.misaligned("margin"),
                                    scores.near_miss("margin"), reference_in(x, y, ref)["margin"] if ref is not None else None,
                                    bands=(band, ref.band, ref.group) if ref is not None else None)
            c["pairs"], c["true_share"] = len(sub), round(float(bad.mean()), 4)
            out[f"{kind}_{int(round(100 * share))}"] = c
            if kind == "fuzzy" and share == 0.17:  # the margin's scale grows as a corpus shrinks: smaller corpora
                for size in sizes:
                    pick = np.sort(np.random.default_rng(seed).choice(len(sub), size, replace=False))
                    xs, ys, os_ = x[pick], y[pick], [origins[i] for i in pick]
                    sc = score_pairs(xs, ys, os_, FilterConfig().k, seed)
                    c = calibration_figures(sc.real("margin"), bad[pick], kinds[pick], max_false_reject, sc.misaligned("margin"),
                                            None, reference_in(xs, ys, ref)["margin"] if ref is not None else None, near_given=False,
                                            bands=(band[pick], ref.band, ref.group) if ref is not None else None)
                    c["pairs"], c["true_share"] = size, round(float(bad[pick].mean()), 4)
                    out[f"fuzzy_17_n{size}"] = c
    return out


def standardise(v: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """(v − median) / MAD of the reference scores (the corpus's own pairs): comparable units for a sum."""
    med = float(np.median(ref))
    return (v - med) / max(float(np.median(np.abs(ref - med))), 1e-9)


def bench_dual_xent(enc, table: pa.Table, forward_dir: str, reverse_dir: str, seed: int,
                    max_false_reject: float = MAX_FALSE_REJECT) -> dict:
    """Dual conditional cross-entropy on the near-miss dev set: OLD/NEW calibration and hindsight, as bench_near_miss."""
    from mtcore.alignment import negatives
    from mtcore.alignment.dual_xent import dual_xent_scores
    from mtcore.nmt.checkpoint import load_checkpoint

    fwd, rev = load_checkpoint(forward_dir), load_checkpoint(reverse_dir)
    src, tgt, origins = table["src"].to_pylist(), table["tgt"].to_pylist(), table["origin"].to_pylist()
    bad = np.asarray(table["label"].to_pylist(), dtype=bool)
    kinds = np.asarray(table["kind"].to_pylist())
    t0 = time.perf_counter()
    real = dual_xent_scores(fwd, rev, src, tgt)
    seconds = time.perf_counter() - t0
    partner = misaligned_partners(origins, len(src), seed)
    mis = dual_xent_scores(fwd, rev, src, [tgt[j] for j in partner])
    # The same near-miss negatives the filter calibrates on (mtcore.alignment.filter.score_pairs), made from this set.
    pairs = negatives.near_miss_pairs(src, tgt, origins, seed, FilterConfig().synthetic_rows)
    near = dual_xent_scores(fwd, rev, [src[i] for i in pairs.rows], pairs.targets)
    out = {"models": {"forward": forward_dir, "reverse": reverse_dir}, "pairs_per_second": round(len(src) / seconds, 1)}

    out["dual_xent"] = calibration_figures(real, bad, kinds, max_false_reject, mis, near)
    x, y = enc.encode(src), enc.encode(tgt)
    margin = score_pairs(x, y, origins, FilterConfig().k, seed).real("margin")
    out["margin_plus_dual_xent"] = calibration_figures(standardise(margin, margin) + standardise(real, real), bad, kinds, max_false_reject)
    return out


def union_reference_thresholds(real: np.ndarray, reference: np.ndarray, floor: np.ndarray,
                               max_false_reject: float = MAX_FALSE_REJECT) -> tuple[np.ndarray, float, float]:
    """(thresholds, π below them, estimated false rejects) for two scores read together: a row is rejected
    when *either* of its scores is below its threshold. `real` (n, 2) and `reference` (m, 2) hold the
    corpus's and the known-good pairs' scores, one column per score; `floor` (2,) the lowest threshold of
    each (−inf: none).

    `reference_threshold` in two dimensions: the pair (t₀, t₁) with the most F_real − 2·F_good, F_good the
    share of reference pairs the union rejects, kept ≤ `max_false_reject` (a floor may force more). Each
    score catches its own kind of noise (the margin random pairs, the pair classifier near misses); a single
    budget over the union keeps the false rejects of both together at the target. Only the reference's
    own values change F_good, so each threshold's candidates are the reference scores within the budget."""
    real, reference, floor = np.asarray(real, float), np.asarray(reference, float), np.asarray(floor, float)
    m = len(reference)
    cands = []
    for j in range(2):
        ref_sorted = np.sort(reference[:, j])
        within = ref_sorted[: int(np.floor(max_false_reject * m)) + 1]  # t = ref_sorted[i] rejects i reference pairs
        c = np.unique(np.concatenate([[floor[j]], within[within > floor[j]]]))
        cands.append(c)
    best, best_gain, cap = (cands[0][0], cands[1][0]), -np.inf, None
    for t0 in cands[0]:
        low0, ref_low0 = real[:, 0] < t0, reference[:, 0] < t0
        rest = np.sort(real[~low0, 1])
        ref_rest = np.sort(reference[~ref_low0, 1])
        f_real = (low0.sum() + np.searchsorted(rest, cands[1])) / max(1, len(real))
        f_good = (ref_low0.sum() + np.searchsorted(ref_rest, cands[1])) / max(1, m)
        if cap is None:  # the floors' own false rejects, when they exceed the budget
            cap = max(max_false_reject, float(f_good[0]))
        gain = np.where(f_good <= cap, f_real - 2.0 * f_good, -np.inf)
        i = int(np.argmax(gain))
        if gain[i] > best_gain:
            best, best_gain = (t0, cands[1][i]), float(gain[i])
    t = np.asarray(best, float)
    rejected = (real < t).any(axis=1) if len(real) else np.zeros(0, bool)
    est_fr = float((reference < t).any(axis=1).mean()) if m else 0.0
    below = float(rejected.mean()) if len(real) else 0.0
    share = max(0.0, (below - est_fr) / max(1e-9, 1.0 - est_fr))
    return t, share, est_fr


def bench_classifier(scorer, enc, nm: pa.Table, planted: pa.Table, catalogs: pa.Table, ref: pa.Table | None, seed: int,
                     max_false_reject: float = MAX_FALSE_REJECT, outdated: pa.Table | None = None) -> dict:
    """The pair classifier (`--score classifier`) on the near-miss dev set (and the outdated-translation one), the
    noise-share sweep and the planted set, calibrated as the filter does (its reference pairs scored directly: the logit has no neighbourhood);
    `union_ref`: the margin and the classifier read together (`union_reference_thresholds`)."""
    from mtcore.alignment import negatives

    ref_scores = scorer.score(ref["src"].to_pylist(), ref["tgt"].to_pylist()) if ref is not None else None
    ref_emb = embed_reference(ref, enc) if ref is not None else None

    def figures(src, tgt, origins, bad, kinds, near_given=True):
        partner = misaligned_partners(origins, len(src), seed)
        real = scorer.score(src, tgt)
        mis = scorer.score(src, [tgt[j] for j in partner])
        near = None
        if near_given:
            pairs = negatives.near_miss_pairs(src, tgt, origins, seed, FilterConfig().synthetic_rows)
            near = scorer.score([src[i] for i in pairs.rows], pairs.targets)
        c = calibration_figures(real, bad, kinds, max_false_reject, mis, near, ref_scores, near_given,
                                bands=(length_bands(src), ref_emb.band, ref_emb.group) if ref_emb is not None else None)
        if ref_emb is not None:  # margin OR classifier, one reference budget over the union
            x, y = enc.encode(src), enc.encode(tgt)
            sc = score_pairs(x, y, origins, FilterConfig().k, seed)
            margin, ref_margin = sc.real("margin"), reference_in(x, y, ref_emb)["margin"]
            t, share, est = union_reference_thresholds(np.c_[margin, real], np.c_[ref_margin, ref_scores],
                                                        np.array([auto_threshold(margin, sc.misaligned("margin")), -np.inf]), max_false_reject)
            rej = (margin < t[0]) | (real < t[1])
            c["union_ref"] = prf(rej, bad) | {"thresholds": [round(float(v), 4) for v in t], "estimated_share": round(share, 4),
                                              "estimated_false_reject": round(est, 4), "recall_by_kind": recall_by_kind(rej, kinds)}
        return real, c

    out = {}
    src, tgt, origins = nm["src"].to_pylist(), nm["tgt"].to_pylist(), nm["origin"].to_pylist()
    bad, kinds = np.asarray(nm["label"].to_pylist(), dtype=bool), np.asarray(nm["kind"].to_pylist())
    t0 = time.perf_counter()
    scorer.score(src, tgt)
    out["pairs_per_second"] = round(len(src) / (time.perf_counter() - t0), 1)  # the dev set's pairs, one process

    def dev_set(table: pa.Table, name: str, prefix: str) -> np.ndarray:
        """A labelled dev set: the classifier's figures, and the cleaning rules before it (what the main job does)."""
        t_bad, t_kinds = np.asarray(table["label"].to_pylist(), dtype=bool), np.asarray(table["kind"].to_pylist())
        real, out[name] = figures(table["src"].to_pylist(), table["tgt"].to_pylist(), table["origin"].to_pylist(), t_bad, t_kinds)
        rules, band = cleaning_rules(table), length_bands(table["src"].to_pylist())
        for which in ("old", "ref", "pooled", "budget"):
            if which in out[name]:
                rej = rules | rejected(real, out[name][which], band)
                out[f"rules_plus_classifier_{prefix}{which}"] = prf(rej, t_bad) | {"recall_by_kind": recall_by_kind(rej, t_kinds)}
        return real

    real = dev_set(nm, "near_miss", "")
    if outdated is not None:
        dev_set(outdated, "outdated", "outdated_")
    x, y = enc.encode(src), enc.encode(tgt)
    margin = score_pairs(x, y, origins, FilterConfig().k, seed).real("margin")
    out["margin_plus_classifier"] = calibration_figures(standardise(margin, margin) + standardise(real, real), bad, kinds, max_false_reject)
    out["noise_share"] = {}
    for kind, share in (("fuzzy", 0.0), ("fuzzy", 0.05), ("fuzzy", 0.17), ("fuzzy", 0.4), ("neighbour", 0.17)):
        new_tgt, nbad, rows = mix_noise(catalogs, kind, share, seed)
        sub = catalogs.take(pa.array(rows))
        _, c = figures(sub["src"].to_pylist(), new_tgt, sub["origin"].to_pylist(), nbad, np.where(nbad, kind, "ok"), near_given=False)
        c["pairs"], c["true_share"] = len(sub), round(float(nbad.mean()), 4)
        out["noise_share"][f"{kind}_{int(round(100 * share))}"] = c
    out["planted"] = {}
    p_src, p_origins = planted["src"].to_pylist(), planted["origin"].to_pylist()
    for kind in ("shuffled", "near_miss", "near_miss_hard", "partial"):
        p_tgt, pbad = inject(planted, kind, 0.1, np.random.default_rng(seed))
        _, c = figures(p_src, p_tgt, p_origins, pbad, np.where(pbad, kind, "ok"), near_given=False)
        out["planted"][kind] = c
    return out


# --------------------------------------------------------------------------- documents


VECALIGN_SETTINGS = {"max_size": 4, "merge_factor": 0.0}  # Vecalign's own: blocks up to 4, no cost for merging


def synthetic_documents(table: pa.Table, size: int, rate: float, rng: np.random.Generator):
    """Documents of `size` source sentences from consecutive pairs, with edits at known places."""
    src_all, tgt_all = table["src"].to_pylist(), table["tgt"].to_pylist()
    docs = []
    for start in range(0, len(src_all) - size + 1, size):
        s_in, t_in = src_all[start : start + size], tgt_all[start : start + size]
        src, tgt, gold = [], [], []
        k = 0
        while k < size:
            u = rng.random()
            a, b = len(src), len(tgt)
            if u < rate:  # deletion: source sentence left untranslated
                src.append(s_in[k])
                gold.append(Block((a,), (), 0))
                k += 1
            elif u < 2 * rate:  # insertion: a target sentence from elsewhere, then the 1-1
                tgt.append(tgt_all[int(rng.integers(len(tgt_all)))])
                gold.append(Block((), (b,), 0))
            elif u < 3 * rate and k + 1 < size:  # 2-1: two sources translated as one target
                src += [s_in[k], s_in[k + 1]]
                tgt.append(f"{t_in[k]} {t_in[k + 1]}")
                gold.append(Block((a, a + 1), (b,), 0))
                k += 2
            elif u < 4 * rate and k + 1 < size:  # 1-2: one source (two joined) translated as two
                src.append(f"{s_in[k]} {s_in[k + 1]}")
                tgt += [t_in[k], t_in[k + 1]]
                gold.append(Block((a,), (b, b + 1), 0))
                k += 2
            else:
                src.append(s_in[k])
                tgt.append(t_in[k])
                gold.append(Block((a,), (b,), 0))
                k += 1
        docs.append((src, tgt, gold))
    return docs


def gale_church(src: list[str], tgt: list[str]) -> list[Block]:
    """Gale & Church (1993): DP over character lengths with their priors; 1-1, 1-0, 0-1, 2-1, 1-2, 2-2."""
    priors = {(1, 1): 0.89, (1, 0): 0.0099, (0, 1): 0.0099, (2, 1): 0.089 / 2, (1, 2): 0.089 / 2, (2, 2): 0.011}
    ls, lt = [len(s) + 1 for s in src], [len(t) + 1 for t in tgt]
    c = sum(lt) / sum(ls)
    s2 = 6.8

    def cost(a_len, b_len, move):
        pen = -math.log(priors[move])
        if a_len == 0 or b_len == 0:
            return pen
        mean = (a_len + b_len / c) / 2
        z = (c * a_len - b_len) / math.sqrt(mean * s2)
        p = max(2 * (1 - 0.5 * (1 + math.erf(abs(z) / math.sqrt(2)))), 1e-300)
        return pen - math.log(p)

    N, M = len(src), len(tgt)
    D = np.full((N + 1, M + 1), np.inf)
    back = {}
    D[0, 0] = 0
    for i in range(N + 1):
        for j in range(M + 1):
            if i == j == 0:
                continue
            for a, b in priors:
                if i >= a and j >= b and np.isfinite(D[i - a, j - b]):
                    v = D[i - a, j - b] + cost(sum(ls[i - a : i]), sum(lt[j - b : j]), (a, b))
                    if v < D[i, j]:
                        D[i, j], back[i, j] = v, (a, b)
    blocks, i, j = [], N, M
    while i or j:
        a, b = back[i, j]
        blocks.append(Block(tuple(range(i - a, i)), tuple(range(j - b, j)), 0.0))
        i, j = i - a, j - b
    return blocks[::-1]


def bench_documents(enc, table: pa.Table, seed: int, size: int = 150, rate: float = 0.05) -> dict:
    docs = synthetic_documents(table, size, rate, np.random.default_rng(seed))
    ours, vecalign, anchor, t_ours, kinds = [], [], [], 0.0, Counter()
    for src, tgt, gold in docs:
        kinds.update(b.kind for b in gold)
        t0 = time.perf_counter()
        pred = align_documents(src, tgt, enc, DocAlignConfig(seed=seed))
        t_ours += time.perf_counter() - t0
        ours.append(strict_f1(pred, gold))
        vecalign.append(strict_f1(align_documents(src, tgt, enc, DocAlignConfig(**VECALIGN_SETTINGS, seed=seed)), gold))
        anchor.append(strict_f1(gale_church(src, tgt), gold))
    mean = lambda rows, k: round(float(np.mean([r[k] for r in rows])), 4)  # noqa: E731
    return {
        "documents": len(docs),
        "sentences_per_doc": size,
        "gold_blocks": dict(kinds),
        "ours": {k: mean(ours, k) for k in ("precision", "recall", "f1")},
        "vecalign_settings": {k: mean(vecalign, k) for k in ("precision", "recall", "f1")},
        "anchor_gale_church": {k: mean(anchor, k) for k in ("precision", "recall", "f1")},
        "seconds_per_doc": round(t_ours / max(1, len(docs)), 3),
    }


def bench_short_documents(enc, table: pa.Table, seed: int, sizes=(1, 2, 3, 5, 10, 20), rate: float = 0.05,
                          max_docs: int = 150) -> dict:
    """Documents of a few sentences, where the random pairs are mostly the true ones: background top-up vs none.

    Micro-averaged strict F1 over all documents of a size (a one-sentence document has one block)."""
    rows = {}
    for size in sizes:
        docs = synthetic_documents(table, size, rate, np.random.default_rng(seed))[:max_docs]
        counts = {name: np.zeros(3) for name in ("ours", "no_background", "gale_church")}  # tp, predicted, gold
        for src, tgt, gold in docs:
            preds = {"ours": align_documents(src, tgt, enc, DocAlignConfig(seed=seed)),
                     "no_background": align_documents(src, tgt, enc, DocAlignConfig(seed=seed, min_random=0)),
                     "gale_church": gale_church(src, tgt)}
            g = {(b.src, b.tgt) for b in gold if b.src and b.tgt}
            for name, pred in preds.items():
                p_ = {(b.src, b.tgt) for b in pred if b.src and b.tgt}
                counts[name] += (len(p_ & g), len(p_), len(g))
        rows[size] = {"documents": len(docs)}
        for name, (tp, n_pred, n_gold) in counts.items():
            prec, rec = tp / max(n_pred, 1), tp / max(n_gold, 1)
            rows[size][name] = {"precision": round(prec, 4), "recall": round(rec, 4),
                                "f1": round(2 * prec * rec / max(prec + rec, 1e-9), 4)}
    return rows


def bench_one_sentence_pairs(enc, table: pa.Table, seed: int, n: int = 150) -> dict:
    """One-sentence documents: a true pair should be kept 1-1, an unrelated one deleted (1-0 + 0-1)."""
    src, tgt = table["src"].to_pylist(), table["tgt"].to_pylist()
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(src), size=min(2 * n, len(src)), replace=False)
    true, wrong = idx[:n], list(zip(idx[n:], rng.permutation(idx[n:])))
    out = {}
    for name, cfg in (("ours", DocAlignConfig(seed=seed)), ("no_background", DocAlignConfig(seed=seed, min_random=0))):
        kept = sum(align_documents([src[i]], [tgt[i]], enc, cfg)[0].kind == "1-1" for i in true)
        deleted = sum(align_documents([src[i]], [tgt[j]], enc, cfg)[0].kind != "1-1" for i, j in wrong)
        out[name] = {"true_kept": kept, "true_pairs": len(true), "unrelated_deleted": deleted, "unrelated_pairs": len(wrong)}
    return out


def bench_maint_guide(enc) -> dict | None:
    en, vi = DATA_DIR / "docs" / "maint-guide.en.txt", DATA_DIR / "docs" / "maint-guide.vi.txt"
    if not (en.exists() and vi.exists()):
        return None
    src, tgt = read_document(en), read_document(vi)
    t0 = time.perf_counter()
    blocks = align_documents(src, tgt, enc)
    secs = time.perf_counter() - t0
    kinds = Counter(b.kind for b in blocks)
    return {"src_sentences": len(src), "tgt_sentences": len(tgt), "seconds": round(secs, 2), "blocks": dict(kinds.most_common())}


# --------------------------------------------------------------------------- main


def print_documents(enc, all_pairs: pa.Table, args, res: dict) -> None:
    res["documents"] = d = bench_documents(enc, all_pairs, args.seed)
    print(f"== document alignment, {d['documents']} synthetic documents × {d['sentences_per_doc']} sentences, gold {d['gold_blocks']}")
    o, g = d["ours"], d["anchor_gale_church"]
    print(f"  strict F1 ours {o['f1']:.3f} (P {o['precision']:.3f} R {o['recall']:.3f})   Gale–Church anchor {g['f1']:.3f}   ratio {o['f1'] / max(g['f1'], 1e-9):.2f}x   ({d['seconds_per_doc']} s/doc)")
    print(f"  with Vecalign's settings (blocks up to 4, merges free): {d['vecalign_settings']['f1']:.3f}")

    res["short_documents"] = short = bench_short_documents(enc, all_pairs, args.seed)
    print("== short documents (strict F1, micro): ours (background top-up) | no background | Gale–Church anchor | ratio to the anchor")
    for size, r in short.items():
        print(f"  {size:3d} sentences × {r['documents']:3d} documents   {r['ours']['f1']:.3f} | {r['no_background']['f1']:.3f} | "
              f"{r['gale_church']['f1']:.3f} | {r['ours']['f1'] / max(r['gale_church']['f1'], 1e-9):.2f}x")

    res["one_sentence_pairs"] = one = bench_one_sentence_pairs(enc, all_pairs, args.seed)
    for name, r in one.items():
        print(f"  one-sentence documents, {name}: true pairs kept 1-1 {r['true_kept']}/{r['true_pairs']}, "
              f"unrelated pairs deleted {r['unrelated_deleted']}/{r['unrelated_pairs']}")

    res["maint_guide"] = m = bench_maint_guide(enc)
    if m:
        print(f"== maint-guide en/vi: {m['src_sentences']} × {m['tgt_sentences']} sentences in {m['seconds']} s; blocks {m['blocks']}")


def print_near_miss(title: str, m: dict, fmt) -> None:
    print(f"== {title}: {m['pairs']} pairs, {m['misaligned']} misaligned ({100 * m['true_share']:.1f} %)")
    for name in ("cosine", "margin"):
        c = m[name]
        print(f"  {name:6s} AUC {c['roc_auc']:.3f}")
        for which in ("old", "new", "ref", "pooled", "budget", "hindsight"):
            if which not in c:
                continue
            r = c[which]
            extra = f" est. noise {r['estimated_share']:.3f}" if "estimated_share" in r else ""
            print(f"    {which:9s} {fmt(r)}  t={r['threshold']:.3f}{extra}  recall by kind {r['recall_by_kind']}")
    for k, r in m["baselines"].items():
        print(f"  baseline {k:26s} {fmt(r)}  recall by kind {r['recall_by_kind']}")
    for k in (k for k in m if k.startswith("rules_plus_")):
        print(f"  cleaning rules + filter {k.rsplit('_', 1)[1].upper():3s} {fmt(m[k])}  recall by kind {m[k]['recall_by_kind']}")


def print_classifier(args, enc, nm: pa.Table, catalogs: pa.Table, fmt, outdated: pa.Table | None = None) -> dict:
    from pathlib import Path

    from mtcore.alignment.classifier import ensure_classifier, load_pair_scorer, read_classifier_metrics
    from mtcore.embedding import resolve_encoder
    from mtcore.embedding.encoder import REFERENCE_FILE

    spec = resolve_encoder(args.encoder)
    trained = read_classifier_metrics(ensure_classifier(spec))
    scorer = load_pair_scorer(spec)
    ref_path = Path(spec) / REFERENCE_FILE
    ref = read_corpus(ref_path) if ref_path.exists() else None
    planted = quick_clean(read_corpus(TEST)).sort_by([("origin", "ascending"), ("id", "ascending")])
    c = bench_classifier(scorer, enc, nm, planted, catalogs, ref, args.seed, args.max_false_reject, outdated)
    c["trained"] = trained
    print(f"== pair classifier ({trained.get('train_pairs', 0):,} training pairs, {trained.get('train_seconds', 0):.0f} s of training; "
          f"{c['pairs_per_second']} pairs/s scored)")
    for name in ("near_miss", "margin_plus_classifier", "outdated"):
        if name not in c:
            continue
        r = c[name]
        print(f"  {name:22s} AUC {r['roc_auc']:.3f}")
        for which in ("old", "new", "ref", "pooled", "budget", "hindsight"):
            if which in r:
                extra = f" est. noise {r[which]['estimated_share']:.3f}" if "estimated_share" in r[which] else ""
                print(f"    {which:9s} {fmt(r[which])}  t={r[which]['threshold']:.3f}{extra}  recall by kind {r[which]['recall_by_kind']}")
        if "union_ref" in r:
            u = r["union_ref"]
            print(f"    margin OR classifier, REF over the union: {fmt(u)}  t={u['thresholds']}  recall by kind {u['recall_by_kind']}")
    for k in (k for k in c if k.startswith("rules_plus_classifier_")):
        print(f"  cleaning rules + classifier {k.removeprefix('rules_plus_classifier_').upper():12s} {fmt(c[k])}  recall by kind {c[k]['recall_by_kind']}")
    for k, r in c["noise_share"].items():
        cols = "  ".join(f"{w.upper()} R {r[w]['recall']:.3f} FR {100 * r[w]['false_reject']:.1f} %" for w in ("old", "ref", "pooled", "budget", "union_ref", "hindsight") if w in r)
        print(f"  noise {k:13s} {r['pairs']} pairs, {100 * r['true_share']:4.1f} % bad, AUC {r['roc_auc']:.3f}:  {cols}")
    for k, r in c["planted"].items():
        cols = " | ".join(f"{w.upper()} {fmt(r[w])}" for w in ("old", "ref", "pooled", "budget", "union_ref", "hindsight") if w in r)
        print(f"  planted {k:15s} AUC {r['roc_auc']:.3f}  {cols}")
    return c


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--encoder", default="builtin")
    ap.add_argument("--n", type=int, default=1000, help="held-out pairs (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="also write the figures here")
    ap.add_argument("--max-false-reject", type=float, default=MAX_FALSE_REJECT, help="target for the NEW calibration (default: %(default)s)")
    ap.add_argument("--skip-documents", action="store_true", help="leave out the document-alignment section")
    ap.add_argument("--nmt", nargs=2, metavar=("FORWARD", "REVERSE"), help="en→vi and vi→en checkpoints: add the dual cross-entropy score")
    ap.add_argument("--only-near-miss", action="store_true", help="the near-miss section only")
    ap.add_argument("--only-documents", action="store_true", help="the document-alignment section only")
    ap.add_argument("--classifier", action="store_true", help="add the pair classifier (--score classifier; the built-in one is trained on first use)")
    args = ap.parse_args(argv)
    enc = load_encoder(args.encoder)
    table = heldout_pairs(args.n, args.seed)
    res = {"machine": f"{platform.node()} {platform.processor() or platform.machine()}", "date": date.today().isoformat(), "encoder": args.encoder,
           "load_average_at_start": [round(v, 2) for v in os.getloadavg()]}
    print(f"machine {res['machine']}, {os.cpu_count()} CPUs, load average {res['load_average_at_start']}, {res['date']}")

    res["encoder_retrieval"] = e = bench_encoder(enc, table)
    print(f"== encoder retrieval P@1 on {e['ours']['heldout_pairs']} held-out pairs (test catalogs)")
    a = e["anchor_untrained"]
    for d in ("en_vi", "vi_en"):
        o = e["ours"][f"p_at_1_{d}"]
        print(f"  {d}: ours {o:.3f}   untrained anchor {a[f'p_at_1_{d}']:.3f}   ratio {o / max(a[f'p_at_1_{d}'], 1e-9):.1f}x")

    res["long_sentences"] = ls = bench_long_sentences(enc, args.seed)
    if ls and ls["long_pairs"]:
        w, a = ls["whole"], ls["first_64"]
        print(f"== long sentences: {ls['long_pairs']} pairs over 64 pieces (of {ls['sample']:,} raw pairs), each against its "
              f"target cut to 60-80 % of its words: ROC AUC full vs cut, whole sentences {w['roc_auc']:.3f} vs the first-64-pieces "
              f"anchor {a['roc_auc']:.3f} (ratio {w['roc_auc'] / max(a['roc_auc'], 1e-9):.2f}x); cut scored as the full pair: "
              f"{100 * w['same_score']:.0f} % vs {100 * a['same_score']:.0f} %")

    if args.only_documents:
        print_documents(enc, quick_clean(read_corpus(TEST)).sort_by([("origin", "ascending"), ("id", "ascending")]), args, res)
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(res, fh, indent=2)
        return 0
    ref, n_ref = reference_embeddings(args.encoder, enc)
    res["reference_pairs"] = n_ref
    print(f"calibrations: OLD = random pairs, NEW = near misses made from the corpus, REF = fewest errors against {n_ref} known-good "
          f"pairs (the encoder's held-out catalogs), at most {args.max_false_reject:g} of them rejected (--reference-rule fewest_errors); "
          "POOLED = the same pairs' false-reject quantile, the most recall within the budget (the default before 2026-11-28, night); "
          "BUDGET = that quantile in each band of source length (1 word, 2-3, 4+; the default); "
          "hindsight = the best threshold at that false-reject rate")
    fmt = lambda r: f"P {r['precision']:.3f} R {r['recall']:.3f} F1 {r['f1']:.3f} FR {100 * r['false_reject']:.1f} %"  # noqa: E731
    outdated = pq.read_table(OUTDATED_DEV) if OUTDATED_DEV.exists() else None
    if NEAR_MISS_DEV.exists():
        nm = pq.read_table(NEAR_MISS_DEV)
        res["near_miss"] = m = bench_near_miss(enc, nm, args.seed, args.max_false_reject, ref)
        print_near_miss("near-miss dev set (made from held-out catalogs)", m, fmt)
        if outdated is not None:
            res["outdated"] = m = bench_near_miss(enc, outdated, args.seed, args.max_false_reject, ref)
            print_near_miss("outdated-translation dev set (real fuzzy entries of the source catalogs)", m, fmt)
        dev_catalogs = quick_clean(pa.concat_tables([read_corpus(TEST), read_corpus(DEV)])).sort_by([("origin", "ascending"), ("id", "ascending")])
        res["noise_share"] = ns = bench_noise_share(enc, dev_catalogs, args.seed, args.max_false_reject, ref)
        print("== does the threshold follow the noise share? held-out catalogs with outdated (fuzzy) or shifted (neighbour) targets, margin")
        for k, c in ns.items():
            cols = "  ".join(f"{w.upper()} R {c[w]['recall']:.3f} FR {100 * c[w]['false_reject']:.1f} %" for w in ("old", "new", "ref", "pooled", "budget", "hindsight") if w in c)
            print(f"  {k:13s} {c['pairs']} pairs, {100 * c['true_share']:4.1f} % bad, AUC {c['roc_auc']:.3f}:  {cols}")
        if args.nmt:
            res["dual_xent"] = dx = bench_dual_xent(enc, nm, *args.nmt, args.seed, args.max_false_reject)
            print(f"  dual conditional cross-entropy ({dx['pairs_per_second']} pairs/s, each scored in both directions)")
            for name in ("dual_xent", "margin_plus_dual_xent"):
                c = dx[name]
                print(f"  {name:22s} AUC {c['roc_auc']:.3f}")
                for which in ("old", "new", "hindsight"):
                    if which in c:
                        r = c[which]
                        extra = f" est. noise {r['estimated_share']:.3f}" if "estimated_share" in r else ""
                        print(f"    {which:9s} {fmt(r)}  t={r['threshold']:.3f}{extra}  recall by kind {r['recall_by_kind']}")
        if args.classifier:
            res["classifier"] = print_classifier(args, enc, nm, dev_catalogs, fmt, outdated)
        if args.only_near_miss:
            if args.json:
                with open(args.json, "w") as fh:
                    json.dump(res, fh, indent=2)
            return 0

    all_pairs = quick_clean(read_corpus(TEST)).sort_by([("origin", "ascending"), ("id", "ascending")])
    res["filter"] = f = bench_filter(enc, all_pairs, args.seed, max_false_reject=args.max_false_reject, ref=ref)
    print(f"== planted: {len(all_pairs)} held-out pairs, 10 % misaligned, threshold auto: OLD | NEW | REF calibration (P / R / F1 / false rejects)")
    for kind, row in f.items():
        la = row["anchor_length"]
        for name in ("cosine", "margin"):
            cols = " | ".join(f"{w} {fmt(row[key])} (t={row[key]['threshold']:.3f})"
                              for w, key in (("OLD", name), ("NEW", f"{name}_new"), ("REF", f"{name}_ref"), ("POOLED", f"{name}_pooled"),
                                             ("BUDGET", f"{name}_budget")) if key in row)
            print(f"  {kind:15s} {name:6s} {cols}   length-ratio anchor F1 {la['f1']:.3f}")

    if args.skip_documents:
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(res, fh, indent=2)
        return 0
    print_documents(enc, all_pairs, args, res)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
