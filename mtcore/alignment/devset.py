"""The near-miss development set: correct catalog pairs mixed with near-miss misalignments, labelled.

Built from the held-out splits (`data/test.parquet`, `data/dev.parquet`: catalogs the
built-in encoder never trains on) by `pipelines/build_near_miss_dev.py` and shipped as
`data/near_miss_dev.parquet` (provenance in `data/SOURCES.md`). Columns: `src`, `tgt`,
`origin`, `id`, `label` (1 = misaligned), `kind`.

Each misaligned row *replaces* its correct target, as noise does in a real catalog:
- `version`: the translation of the most similar *other* English message of the same
  catalog (word Jaccard ≥ `min_jaccard`, different words, different translation): what
  a catalog keeps when the English changed and the translation did not ("Show backup
  files" with the translation of "Show hidden files"). The other message's own pair is
  dropped, as the old message is gone from a real catalog (otherwise "the same Vietnamese
  twice" would give the answer away).
- `neighbour`: the next message's translation (an off-by-one shift).
- `partial`: the translation with its last clause / last words dropped.
- `swap`: the translation with a number, option, placeholder or name changed.

The kinds are made with the same recipes as the calibration negatives
(`mtcore.alignment.negatives`) but the `version` kind keeps only close matches; the dev
set's rows never reach the encoder's training data (the splits are excluded there).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mtcore.alignment import negatives

MIX = {"version": 0.55, "neighbour": 0.15, "partial": 0.15, "swap": 0.15}  # mostly outdated translations, as in real catalogs


def _jaccard(a: frozenset, b: frozenset) -> float:
    return len(a & b) / max(1, len(a | b))


def build_near_miss_dev(table: pa.Table, share: float = 0.17, seed: int = 0, min_jaccard: float = 0.5) -> pa.Table:
    """`table` (src, tgt, origin, id) with about `share` of its rows misaligned by the kinds in `MIX`."""
    if not 0 < share < 1:
        raise ValueError(f"share {share}: a share of the rows in (0, 1)")
    rng = np.random.default_rng(seed)
    table = table.sort_by([("origin", "ascending"), ("id", "ascending")])
    src, tgt, origin = table["src"].to_pylist(), table["tgt"].to_pylist(), table["origin"].to_pylist()
    n = len(src)
    sets = negatives.word_sets(src)
    fuzzy = negatives.fuzzy_partners(src, tgt, origin)
    close = np.array([j >= 0 and _jaccard(sets[i], sets[j]) >= min_jaccard for i, j in enumerate(fuzzy)])
    neighbour = negatives.neighbour_partners(tgt, origin)
    new_tgt, label, kind = list(tgt), np.zeros(n, np.int8), ["ok"] * n
    free, gone = np.ones(n, bool), np.zeros(n, bool)
    for k, frac in MIX.items():
        want = int(round(share * n * frac))
        eligible = np.flatnonzero(free & (close if k == "version" else neighbour >= 0 if k == "neighbour" else True))
        for i in rng.permutation(eligible):
            if want == 0:
                break
            if not free[i] or (k == "version" and not free[fuzzy[i]]):
                continue
            if k == "version":
                new = tgt[fuzzy[i]]
            elif k == "neighbour":
                new = tgt[neighbour[i]]
            elif k == "partial":
                new = negatives.partial_translation(tgt[i], rng)
            else:
                pool = [tgt[j] for j in range(max(0, i - 25), min(n, i + 25)) if origin[j] == origin[i]]
                new = negatives.swap_detail(tgt[i], pool, rng)
            if not new or new == tgt[i]:
                continue
            new_tgt[i], label[i], kind[i], free[i] = new, 1, k, False
            if k == "version":  # the older message is gone from the catalog: its own pair must not stay beside
                gone[fuzzy[i]] = True
                free[fuzzy[i]] = False
            want -= 1
    keep = ~gone | (label == 1)
    out = pa.table({
        "src": pa.array(src, pa.string()),
        "tgt": pa.array(new_tgt, pa.string()),
        "origin": pa.array(origin, pa.string()),
        "id": table["id"],
        "label": pa.array(label),
        "kind": pa.array(kind, pa.string()),
    })
    return out.filter(pa.array(keep))
