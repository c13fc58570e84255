"""Build the near-miss development set from the held-out splits (data/test.parquet + data/dev.parquet).

    python pipelines/build_near_miss_dev.py                    # → data/near_miss_dev.parquet
    python pipelines/build_near_miss_dev.py --share 0.17 --seed 0 --output DIR/near_miss_dev.parquet

Correct catalog pairs with about `--share` of them misaligned as near misses (outdated
translation, neighbouring segment, partial translation, changed number/option/name);
see mtcore/alignment/devset.py. Used by benchmarks/align_quality.py.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

import pyarrow as pa

from mtcore import checks
from mtcore.console import add_common_options
from mtcore.errors import entry_point
from mtcore.alignment.devset import build_near_miss_dev
from mtcore.data.corpus import read_corpus, write_parquet
from mtcore.data.paths import DEV, NEAR_MISS_DEV, TEST
from mtcore.embedding.train import quick_clean


def build_parser() -> argparse.ArgumentParser:
    """The command line (the tests parse every documented command with it)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--output", default=str(NEAR_MISS_DEV))
    ap.add_argument("--share", type=float, default=0.17, help="share of misaligned rows (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=0)
    add_common_options(ap)
    return ap


@entry_point
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    checks.open_share("--share", args.share)
    checks.output_file("--output", args.output)
    cols = ["src", "tgt", "origin", "id"]
    table = quick_clean(pa.concat_tables([read_corpus(p).select(cols) for p in (TEST, DEV)]))
    dev = build_near_miss_dev(table, args.share, args.seed)
    write_parquet(dev, args.output)
    print(f"{len(dev)} pairs, {sum(dev['label'].to_pylist())} misaligned: {dict(Counter(dev['kind'].to_pylist()))} → {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
