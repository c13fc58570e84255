"""Which monolingual sentences are back-translated (the `select_mono` stage).

A sentence is set aside, with its reason, when
- `blank`: the line is empty or only spaces (kept as a row so that the counts are the file's lines);
- `test_overlap`: it is a target of the held-out sets (the cleaning rules' TestOverlap sets; data/dev and
  data/test by default). A test reference in training, even with a synthetic source, is a leak; the cleaning's
  TestOverlap (`match_target`) keeps such pairs out the same way;
- `in_corpus`: it is already the target of a real pair of the aligned corpus. Its back-translation would add a
  noisier source to a target the model already learns; the budget goes to new text instead, as BT pipelines
  deduplicate monolingual data against the parallel data;
- `duplicate`: it repeats an earlier sentence;
- `over_ratio`: it is outside the budget, a seeded sample of at most ratio × real pairs (and `max_mono`).
Sentences are compared in the normalised form the cleaning rules compare (NFC, lower case, letters and digits).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mtcore.cleaning.rules import hash_strings, norm_key
from mtcore.data.ledger import rejects_table

@dataclass
class Selection:
    kept: pa.Table
    rejects: pa.Table
    budget: int
    eligible: int  # sentences left after the exclusions, before the budget


def _keys(texts: pa.Array | pa.ChunkedArray) -> np.ndarray:
    arr = texts.combine_chunks() if isinstance(texts, pa.ChunkedArray) else texts
    return hash_strings(norm_key(arr)) if len(arr) else np.zeros(0, np.uint64)


def select_mono(mono: pa.Table, real_targets: pa.Array, heldout_targets: pa.Array, budget: int, seed: int) -> Selection:
    """`mono` (text, origin, id) → the sentences to translate and the rest, reason-coded; kept + rejects = mono."""
    keys = _keys(mono["text"])
    n = len(keys)
    reason = np.full(n, "", dtype=object)
    blank = ~pc.greater(pc.utf8_length(pc.utf8_trim_whitespace(mono["text"])), 0).to_numpy(zero_copy_only=False)
    reason[blank] = "blank"
    reason[(reason == "") & np.isin(keys, _keys(heldout_targets))] = "test_overlap"
    reason[(reason == "") & np.isin(keys, _keys(real_targets))] = "in_corpus"
    first = np.zeros(n, dtype=bool)
    rest = np.flatnonzero(reason == "")  # repeats among the sentences (a blank line is no first "…")
    first[rest[np.unique(keys[rest], return_index=True)[1]]] = True
    reason[(reason == "") & ~first] = "duplicate"
    eligible = np.flatnonzero(reason == "")
    # The same draw as before the exclusions existed when none applies: a permutation of the candidates.
    rng = np.random.default_rng(seed)
    chosen = np.sort(eligible[rng.permutation(len(eligible))[: min(budget, len(eligible))]])
    reason[np.setdiff1d(eligible, chosen)] = "over_ratio"
    mask = np.zeros(n, dtype=bool)
    mask[chosen] = True
    kept, dropped = mono.filter(pa.array(mask)), mono.filter(pa.array(~mask))
    dropped_reasons = reason[~mask].tolist()
    details = [f"budget {budget}" if r == "over_ratio" else "" for r in dropped_reasons]
    rejects = rejects_table(dropped["text"].to_pylist(), [""] * len(dropped), dropped["origin"].to_pylist(), dropped["id"].to_pylist(),
                            stage="select_mono", reason=dropped_reasons, details=details)
    return Selection(kept, rejects, budget, len(eligible))
