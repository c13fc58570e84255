"""LengthRatio on correct Chinese, Japanese and Korean pairs: the script weights measured, beside every wide
character counted as 3 (the anchor, mtcore before 2026-11-29).

The pairs: data/cjk_catalogs.parquet, the zh_CN, ja and ko catalogs of 16 Debian packages (data/SOURCES.md), human
translations of the same English messages; the en-vi control: the correct pairs of data/near_miss_dev.parquet.
Each pair is normalised as cleaning does and judged by LengthRatio alone (the rule's default bounds), and by
TerminalPunctuation, which compares the same lengths. A reject of a correct pair is a false reject.

    python benchmarks/length_ratio_cjk.py [--examples 3]
"""

from __future__ import annotations

import argparse
import sys
from unittest import mock

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mtcore.cleaning import load_config, rules
from mtcore.cleaning.normalize import normalize_table
from mtcore.data.paths import CJK_CATALOGS, NEAR_MISS_DEV

ANCHOR_WEIGHTS = ((r"\p{Han}", 3), (r"[\p{Hiragana}\p{Katakana}]", 3), (r"\p{Hangul}", 3))


def rejects(table: pa.Table, rule) -> np.ndarray:
    norm, _ = normalize_table(table.select(["src", "tgt"]), load_config(None).normalize)
    return ~np.asarray(rule.accept(rule.score(norm)), dtype=bool)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=3, help="rejected pairs shown per language")
    args = ap.parse_args(argv)
    cjk = pq.read_table(CJK_CATALOGS)
    control = pq.read_table(NEAR_MISS_DEV)
    sets = {lang: cjk.filter(pc.equal(cjk["lang"], lang)) for lang in ("zh", "ja", "ko")}
    sets["vi (control)"] = control.filter(pc.equal(control["label"], 0))
    print(f"{'pairs':<14}{'n':>8}  {'rule':<20}{'anchor (3,3,3)':>15}{'measured':>10}{'ratio':>8}")
    for name, table in sets.items():
        for rule in (rules.LengthRatio(), rules.TerminalPunctuation()):
            with mock.patch.object(rules, "SCRIPT_WEIGHTS", ANCHOR_WEIGHTS):
                old = rejects(table, rule)
            new = rejects(table, rule)
            ratio = f"{new.mean() / old.mean():.2f}" if old.any() else "-"
            print(f"{name:<14}{len(table):>8,}  {rule.name():<20}{old.mean():>14.2%}{new.mean():>10.2%}{ratio:>8}")
            if rule.name() == "LengthRatio" and args.examples:
                for i in np.flatnonzero(new)[: args.examples]:
                    print(f"    still rejected: {table['src'][int(i)].as_py()[:60]!r} -> {table['tgt'][int(i)].as_py()[:40]!r}")
    print("weights measured: " + ", ".join(f"{p} {w}" for p, w in rules.SCRIPT_WEIGHTS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
