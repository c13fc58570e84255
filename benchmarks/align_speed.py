"""Alignment speed: pairs/second of encoding + scoring (cosine, margin, calibration), on this machine.

Paths measured on the same rows: in process (one torch thread per CPU) and Ray Data
(an actor pool of one actor per CPU, one model load each). Also document alignment:
sentences/second of the coarse-to-fine DP against the dense DP on the maint-guide pair.

    python benchmarks/align_speed.py [--rows 20000] [--encoder builtin]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from datetime import date

import torch

from mtcore.alignment.documents import DocAlignConfig, align_documents, read_document
from mtcore.alignment.filter import FilterConfig, score_corpus
from mtcore.data.corpus import read_corpus
from mtcore.embedding import load_encoder, resolve_encoder
from mtcore.data.paths import DATA_DIR, RAW_PARALLEL


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--encoder", default="builtin")
    args = ap.parse_args(argv)
    spec = resolve_encoder(args.encoder)
    table = read_corpus(RAW_PARALLEL).slice(0, args.rows)
    cfg = FilterConfig(encoder=spec, score="margin")
    print(f"machine: {platform.node()}, {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}; {date.today()}")
    _, plain = score_corpus(table, cfg, use_ray=False)
    print(f"in process : {plain['pairs_per_second']:>8} pairs/s  (encode {plain['encode_seconds']} s, score {plain['score_seconds']} s, {len(table):,} pairs)")
    score_corpus(table.slice(0, 2048), cfg, use_ray=True)  # warm-up: Ray start, actor pool
    _, ray_t = score_corpus(table, cfg, use_ray=True)
    print(f"Ray Data   : {ray_t['pairs_per_second']:>8} pairs/s  (encode {ray_t['encode_seconds']} s, score {ray_t['score_seconds']} s)")
    en, vi = DATA_DIR / "docs" / "maint-guide.en.txt", DATA_DIR / "docs" / "maint-guide.vi.txt"
    if en.exists() and vi.exists():
        enc = load_encoder(spec)
        src, tgt = read_document(en), read_document(vi)
        for name, c in (("coarse-to-fine", DocAlignConfig()), ("dense", DocAlignConfig(dense_cells=10**9))):
            t0 = time.perf_counter()
            align_documents(src, tgt, enc, c)
            s = time.perf_counter() - t0
            print(f"documents  : {name:15s} {len(src)}×{len(tgt)} sentences in {s:.2f} s ({(len(src) + len(tgt)) / s:,.0f} sentences/s, encoding included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
