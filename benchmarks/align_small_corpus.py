"""False rejects of the alignment filter on small, clean, single-catalog corpora: margin vs cosine.

    python benchmarks/align_small_corpus.py [--sizes 20,50,100,200,500,1000] [--windows 8]

Windows of consecutive pairs of data/test.parquet (catalogs the built-in encoder never trained on, stored
grouped by catalog, so a window is one or two packages' messages: what a user's small corpus looks like) are
filtered with the defaults (`--threshold auto`, reference calibration), once scored by the margin and once by
cosine. Every pair is a correct translation, so every reject is a false reject. The anchor is cosine; the
figure is the margin's false-reject share, and their ratio. The smallest size where the margin is within
1 point of cosine is where `align_filter` starts to use the margin (`MIN_MARGIN_PAIRS`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from dataclasses import replace

from mtcore.alignment.filter import FilterConfig, filter_table
from mtcore.data import paths
from mtcore.data.corpus import read_corpus


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="20,50,100,200,500,1000")
    ap.add_argument("--windows", type=int, default=8, help="windows per size, spread over the test set")
    args = ap.parse_args()
    test = read_corpus(paths.TEST)
    base = FilterConfig()
    print(f"data/test.parquet, {len(test):,} clean pairs; load {os.getloadavg()[0]:.1f}")
    print("| pairs | windows | margin: false rejects (mean / worst) | cosine: mean / worst | ratio of means |\n|---|---|---|---|---|")
    for size in (int(s) for s in args.sizes.split(",")):
        starts = [i * (len(test) - size) // max(args.windows - 1, 1) for i in range(args.windows)]
        shares: dict[str, list[float]] = {"margin": [], "cosine": []}
        for start in starts:
            window = test.slice(start, size)
            for score in shares:
                _, rejects, *_ = filter_table(window, replace(base, score=score), use_ray=False)
                shares[score].append(len(rejects) / size)
        margin, cosine = (statistics.mean(shares[s]) for s in ("margin", "cosine"))
        print(f"| {size} | {len(starts)} | {100 * margin:.1f} % / {100 * max(shares['margin']):.1f} % | "
              f"{100 * cosine:.1f} % / {100 * max(shares['cosine']):.1f} % | {margin / max(cosine, 1e-9):.1f}× |", flush=True)
    print(f"load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
