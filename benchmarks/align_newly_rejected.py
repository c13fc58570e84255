"""What the default calibration rejects on the embedded corpus that the old one kept (issue 21).

Scores a sample of whole catalogs of data/raw/parallel.parquet, decides with the old
(`calibration="random"`), the near-miss (`"near_miss"`) and the reference rules (`"reference"`,
`reference_rule` fewest_errors, budget_pooled and budget, the default), and prints the kept shares and a random
sample of pairs that the default rejects and budget_pooled (the previous default) kept, to judge by eye.

    python benchmarks/align_newly_rejected.py [--rows 20000] [--show 20] [--seed 0] [--encoder builtin]
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mtcore.alignment.filter import FilterConfig, calibrate, row_thresholds, score_corpus
from mtcore.data.corpus import read_corpus
from mtcore.data.paths import RAW_PARALLEL


def sample_catalogs(table: pa.Table, rows: int, seed: int) -> pa.Table:
    origins = table["origin"].unique().to_pylist()
    chosen, total = [], 0
    for o in np.random.default_rng(seed).permutation(origins):
        n = pc.sum(pc.equal(table["origin"], o)).as_py()
        if total + n > rows:
            continue
        chosen.append(o)
        total += n
    return table.filter(pc.is_in(table["origin"], pa.array(chosen)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--show", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--encoder", default="builtin")
    ap.add_argument("--score", default=FilterConfig().score)
    args = ap.parse_args(argv)
    table = sample_catalogs(read_corpus(RAW_PARALLEL), args.rows, args.seed)
    base = FilterConfig(encoder=args.encoder, score=args.score)
    rej = {}
    # Two scoring passes, not three: the random-pair rule needs only the scores every pass makes.
    scores_ref, timing = score_corpus(table, replace(base, calibration="reference"), use_ray=False)
    print(f"load average {[round(v, 2) for v in os.getloadavg()]}; {len(table)} pairs from {len(set(table['origin'].to_pylist()))} catalogs; {timing}")
    scores_near = score_corpus(table, replace(base, calibration="near_miss"), use_ray=False)[0]
    values = scores_ref.real(args.score)
    rules = (("random", scores_ref, {}), ("near_miss", scores_near, {}),
             ("reference", scores_ref, {"reference_rule": "fewest_errors"}), ("reference", scores_ref, {"reference_rule": "budget_pooled"}),
             ("reference", scores_ref, {"reference_rule": "budget"}))
    for cal, scores, extra in rules:
        c = calibrate(scores, replace(base, calibration=cal, **extra))
        key = (cal, *extra.values())
        rej[key] = values < row_thresholds(scores, c)
        print(f"  {' '.join(key):25s} threshold {c['threshold']:.3f}  est. noise {c['estimated_misaligned_share']:.3f}  kept {100 * (1 - rej[key].mean()):.2f} %  ({c['method']})")
    default = (base.calibration, base.reference_rule) if base.calibration == "reference" else (base.calibration,)
    before = ("reference", "budget_pooled")
    only_new = np.flatnonzero(rej[default] & ~rej[before])
    print(f"  rejected by the default ({' '.join(default)}) rule and not by reference budget_pooled (the default before "
          f"2026-11-28, night): {len(only_new)}; a random {min(args.show, len(only_new))}:")
    src, tgt, origin = table["src"].to_pylist(), table["tgt"].to_pylist(), table["origin"].to_pylist()
    for i in np.random.default_rng(args.seed).choice(only_new, size=min(args.show, len(only_new)), replace=False):
        print(f"  | {origin[i]} | {src[i][:90]!r} | {tgt[i][:90]!r} | {values[i]:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
