"""Alignment quality: encoder retrieval, pair filtering with injected misalignments, document alignment.

Every figure is printed beside an anchor measured in the same run, and as a ratio:

  encoder     retrieval P@1 on 1,000 held-out pairs (data/test.parquet: catalogs never
              trained on), both directions. Anchor: the same architecture and vocabulary,
              untrained (what shared pieces such as %s, names and numbers give for free).
              Goal ≥ 0.90.
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

    python benchmarks/align_quality.py [--encoder builtin] [--n 1000] [--seed 0] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import re
import sys
import time
from collections import Counter
from datetime import date

import numpy as np
import pyarrow as pa

from mtcore.alignment.documents import Block, DocAlignConfig, align_documents, read_document, strict_f1
from mtcore.alignment.filter import FilterConfig, auto_threshold, misaligned_partners, score_pairs
from mtcore.data.corpus import read_corpus
from mtcore.embedding import load_encoder
from mtcore.embedding.encoder import DualEncoder, SentenceEncoder
from mtcore.embedding.train import quick_clean, retrieval_accuracy
from mtcore.data.paths import DATA_DIR, TEST


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
    return {"precision": round(p, 4), "recall": round(r, 4), "f1": round(2 * p * r / (p + r), 4) if p + r else 0.0}


def length_score(src: list[str], tgt: list[str]) -> np.ndarray:
    lr = np.log((np.array([len(t) for t in tgt]) + 1) / (np.array([len(s) for s in src]) + 1))
    return -np.abs(lr - np.median(lr))


def bench_filter(enc, table: pa.Table, seed: int, rate: float = 0.1) -> dict:
    out = {}
    src = table["src"].to_pylist()
    x = enc.encode(src)
    origins = table["origin"].to_pylist()
    for kind in ("shuffled", "near_miss", "near_miss_hard", "partial"):
        rng = np.random.default_rng(seed)
        tgt, bad = inject(table, kind, rate, rng)
        y = enc.encode(tgt)
        scores = score_pairs(x, y, origins, FilterConfig().k, seed)
        row = {"injected": int(bad.sum())}
        for name in ("cosine", "margin"):
            real, mis = scores.real(name), scores.misaligned(name)
            t = auto_threshold(real, mis)
            row[name] = prf(real < t, bad) | {"threshold": round(t, 4)}
        ls = length_score(src, tgt)
        partner = misaligned_partners(origins, len(src), seed)
        ls_mis = length_score(src, [tgt[j] for j in partner])
        row["anchor_length"] = prf(ls < auto_threshold(ls, ls_mis), bad)
        out[kind] = row
    return out


# --------------------------------------------------------------------------- documents


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
    ours, anchor, t_ours, kinds = [], [], 0.0, Counter()
    for src, tgt, gold in docs:
        kinds.update(b.kind for b in gold)
        t0 = time.perf_counter()
        pred = align_documents(src, tgt, enc, DocAlignConfig(seed=seed))
        t_ours += time.perf_counter() - t0
        ours.append(strict_f1(pred, gold))
        anchor.append(strict_f1(gale_church(src, tgt), gold))
    mean = lambda rows, k: round(float(np.mean([r[k] for r in rows])), 4)  # noqa: E731
    return {
        "documents": len(docs),
        "sentences_per_doc": size,
        "gold_blocks": dict(kinds),
        "ours": {k: mean(ours, k) for k in ("precision", "recall", "f1")},
        "anchor_gale_church": {k: mean(anchor, k) for k in ("precision", "recall", "f1")},
        "seconds_per_doc": round(t_ours / max(1, len(docs)), 3),
    }


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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--encoder", default="builtin")
    ap.add_argument("--n", type=int, default=1000, help="held-out pairs (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    enc = load_encoder(args.encoder)
    table = heldout_pairs(args.n, args.seed)
    res = {"machine": f"{platform.node()} {platform.processor() or platform.machine()}", "date": date.today().isoformat(), "encoder": args.encoder}

    res["encoder_retrieval"] = e = bench_encoder(enc, table)
    print(f"== encoder retrieval P@1 on {e['ours']['heldout_pairs']} held-out pairs (test catalogs)")
    a = e["anchor_untrained"]
    for d in ("en_vi", "vi_en"):
        o = e["ours"][f"p_at_1_{d}"]
        print(f"  {d}: ours {o:.3f}   untrained anchor {a[f'p_at_1_{d}']:.3f}   ratio {o / max(a[f'p_at_1_{d}'], 1e-9):.1f}x")

    all_pairs = quick_clean(read_corpus(TEST)).sort_by([("origin", "ascending"), ("id", "ascending")])
    res["filter"] = f = bench_filter(enc, all_pairs, args.seed)
    print(f"== pair filtering, {len(all_pairs)} held-out pairs, 10 % misaligned, auto threshold (P / R / F1 of rejects)")
    for kind, row in f.items():
        la = row["anchor_length"]
        for name in ("cosine", "margin"):
            r = row[name]
            print(f"  {kind:15s} {name:6s} P {r['precision']:.3f} R {r['recall']:.3f} F1 {r['f1']:.3f} (t={r['threshold']:.3f})"
                  f"   length-ratio anchor F1 {la['f1']:.3f}   ratio {r['f1'] / max(la['f1'], 1e-9):.1f}x")

    res["documents"] = d = bench_documents(enc, all_pairs, args.seed)
    print(f"== document alignment, {d['documents']} synthetic documents × {d['sentences_per_doc']} sentences, gold {d['gold_blocks']}")
    o, g = d["ours"], d["anchor_gale_church"]
    print(f"  strict F1 ours {o['f1']:.3f} (P {o['precision']:.3f} R {o['recall']:.3f})   Gale–Church anchor {g['f1']:.3f}   ratio {o['f1'] / max(g['f1'], 1e-9):.2f}x   ({d['seconds_per_doc']} s/doc)")

    res["maint_guide"] = m = bench_maint_guide(enc)
    if m:
        print(f"== maint-guide en/vi: {m['src_sentences']} × {m['tgt_sentences']} sentences in {m['seconds']} s; blocks {m['blocks']}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
