"""Each cleaning rule's reject rate, on its own, on held-out correct catalog pairs (issue 21).

The pairs: the rows of data/near_miss_dev.parquet labelled correct (label 0): the held-out
test/dev catalogs as shipped, minus quick_clean's junk; then those of data/outdated_dev.parquet: 26 other
catalogs' translated entries as their source packages' .po files hold them (raw: untranslated copies,
one-letter messages and translator-credit entries included, as a harvested corpus has them). Every row rule of the default
config is run alone on the normalised pairs (not first-reject-wins), so that each rule's
rate is its own; TestOverlap is skipped (these pairs *are* the test/dev sets).
Rejects of correct pairs are false rejects (the catalogs are human translations; a few
may still be wrong, so the examples are printed to judge).

    python benchmarks/rule_false_rejects.py [--examples 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mtcore.cleaning import load_config
from mtcore.cleaning.normalize import normalize_table
from mtcore.data.paths import NEAR_MISS_DEV, OUTDATED_DEV


def rule_rejects(table: pa.Table, examples: int = 5) -> dict:
    cfg = load_config(None)
    norm, changed = normalize_table(table, cfg.normalize)
    out = {"pairs": len(table), "normalize_changed": {k: int(v.sum()) for k, v in changed.items()}, "rules": {}}
    for rule in cfg.row_rules:
        if rule.name() == "TestOverlap":
            continue
        ok = np.asarray(rule.accept(rule.score(norm)), dtype=bool)
        bad = np.flatnonzero(~ok)
        out["rules"][rule.name()] = {
            "reason": rule.reason,
            "rejected": int(len(bad)),
            "rate": round(len(bad) / max(1, len(table)), 4),
            "examples": [(norm["src"][int(i)].as_py(), norm["tgt"][int(i)].as_py()) for i in bad[:examples]],
        }
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", type=int, default=5)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    res = {}
    for name, path, what in (("near_miss_dev", NEAR_MISS_DEV, "held-out test+dev catalogs"),
                             ("outdated_dev", OUTDATED_DEV, "the outdated-translation set's catalogs")):
        if not path.exists():
            continue
        d = pq.read_table(path)
        good = d.filter(pc.equal(d["label"], 0)).select(["src", "tgt", "origin", "id"])
        res[name] = r_set = rule_rejects(good, args.examples)
        print(f"== each cleaning rule alone on {r_set['pairs']} correct pairs ({what}); normalised: {r_set['normalize_changed']}")
        for rule, r in r_set["rules"].items():
            print(f"  {rule:20s} {r['reason']:22s} {r['rejected']:4d}  {100 * r['rate']:.2f} %")
            for s, t in r["examples"]:
                print(f"      {s[:70]!r} → {t[:70]!r}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=2, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
