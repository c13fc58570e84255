"""Near-miss negatives made from the corpus itself: pairs that are wrong by construction but *look* right.

Random pairs (a source with another row's target) are far too easy: real corpus noise
is mostly near misses (an outdated translation of an earlier version of the message,
the neighbouring segment, a partial translation, a changed number, name or option).
Each kind below is one way of making such a pair from correct ones; the filter
calibrates its threshold on them and the encoder may train on them.

Where the ideas come from:
- `fuzzy`: Bicleaner-AI's synthetic noise (bicleaner_ai/noise.py, "fuzzy" negatives):
  pair a sentence with the translation of the most *similar* other sentence
  (fuzzy matching there; word-overlap Jaccard of the sources here, within the same
  catalog/origin). It imitates "Show backup files" kept with the translation of an
  older "Show hidden files".
- `neighbour`: Bicleaner-AI's "neighbour" noise and Vecalign's observation that
  alignment errors are off-by-one shifts: the next segment of the same origin.
- `partial`: Bicleaner-AI's word-omission noise, at clause level: the target with its
  last clause (or, without one, its last 30–50 % of words) dropped.
- `swap`: a changed number, placeholder, option or name in the target (the kind of
  difference the LASER margin cannot see because the neighbourhood is unchanged).
- `random`: the pairs the filter used before (a derangement within each origin),
  kept as the easy end of the scale.

The LASER margin (Artetxe & Schwenk 2019) scores all of them the same way as real
pairs; what changes is only which bad pairs the threshold is calibrated against.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

KINDS = ("fuzzy", "neighbour", "partial", "swap")  # the near-miss kinds; "random" is the old calibration
_WORD = re.compile(r"\w+", re.UNICODE)
_CLAUSE = re.compile(r"(?<=[,;:.!?])\s+|\s+(?:và|hoặc|nhưng|hay|rồi|để|khi|nếu)\s+")
_NUM = re.compile(r"\d+")
_OPTION = re.compile(r"(?<![\w-])--?[A-Za-z][\w-]*")
_PLACEHOLDER = re.compile(r"%(?:\d+\$)?[-+#0]*\d*(?:\.\d+)?(?:l|ll|h|z)?[sdiuxXfgcp]|\{\d*\}")
_NAME = re.compile(r"(?<!^)(?<![.!?:] )\b[A-Z][a-zA-Z]{2,}\b")


def _groups(origins: list[str] | None, n: int) -> dict[str, np.ndarray]:
    out: dict[str, list[int]] = {}
    for i, o in enumerate(origins if origins is not None else [""] * n):
        out.setdefault(o, []).append(i)
    return {k: np.asarray(v) for k, v in out.items()}


def word_sets(texts: list[str]) -> list[frozenset[str]]:
    return [frozenset(_WORD.findall(t.lower())) for t in texts]


# Rows of one origin searched together for fuzzy partners. A larger origin is searched in consecutive windows of
# this many rows: the search is quadratic in its rows, and one 10M-row origin (a TSV has a single one) could never
# end. The embedded corpus's largest catalog (blender, 29,283 rows) fits in one window.
FUZZY_WINDOW = 32_768
# Rows that calibration searches fuzzy partners for at most: above it, whole windows drawn at random (seeded).
NEAR_MISS_ROWS = 200_000


def fuzzy_windows(origins: list[str] | None, n: int, window: int = FUZZY_WINDOW, max_rows: int = 0,
                  seed: int = 0) -> list[np.ndarray]:
    """The row windows `fuzzy_partners` searches: each origin's rows, cut every `window` rows; with `max_rows`,
    whole windows drawn at random until they hold that many rows."""
    windows = [rows[i : i + window] for rows in _groups(origins, n).values() for i in range(0, len(rows), window)]
    windows = [w for w in windows if len(w) >= 2]
    if not max_rows or sum(map(len, windows)) <= max_rows:
        return windows
    picked, total = [], 0
    for k in np.random.default_rng(seed).permutation(len(windows)):
        if total >= max_rows:
            break
        picked.append(windows[k])
        total += len(windows[k])
    return picked


def fuzzy_partners(src: list[str], tgt: list[str], origins: list[str] | None, chunk: int = 2048,
                   window: int = FUZZY_WINDOW, max_rows: int = 0, seed: int = 0) -> np.ndarray:
    """For each row, the row of the same origin (and window, `fuzzy_windows`) whose source shares the most words
    (Jaccard), with a different target and a different word set (same words: the same message, so the translation
    fits). -1 where the origin has no such row, nothing overlaps, or (with `max_rows`) the row's window was not drawn."""
    from scipy import sparse

    partner = np.full(len(src), -1, dtype=np.int64)
    for rows in fuzzy_windows(origins, len(src), window, max_rows, seed):
        sets = word_sets([src[i] for i in rows])
        tkeys = [" ".join(_WORD.findall(tgt[i].lower())) for i in rows]
        vocab: dict[str, int] = {}
        indptr, indices = [0], []
        for words in sets:
            indices += [vocab.setdefault(w, len(vocab)) for w in words]
            indptr.append(len(indices))
        a = sparse.csr_matrix((np.ones(len(indices), np.float32), indices, indptr), shape=(len(rows), len(vocab)))
        size = np.asarray(a.sum(axis=1)).ravel()
        for start in range(0, len(rows), chunk):
            inter = (a[start : start + chunk] @ a.T).toarray()  # (chunk, rows): shared words
            union = size[start : start + chunk, None] + size[None, :] - inter
            jac = np.where(union > 0, inter / np.maximum(union, 1), 0.0)
            for r in range(len(jac)):
                li = start + r
                i = rows[li]
                row = jac[r]
                row[li] = -1
                for _ in range(8):  # skip rows with the same words or the same translation
                    j = int(np.argmax(row))
                    if row[j] <= 0:
                        break
                    gj = rows[j]
                    if row[j] < 1.0 and tkeys[j] != tkeys[li] and tgt[gj] != tgt[i]:
                        partner[i] = gj
                        break
                    row[j] = -1
    return partner


def neighbour_partners(tgt: list[str], origins: list[str] | None) -> np.ndarray:
    """The next row of the same origin (the previous one for the last), -1 when alone or identical."""
    n = len(tgt)
    partner = np.full(n, -1, dtype=np.int64)
    for rows in _groups(origins, n).values():
        if len(rows) < 2:
            continue
        nxt = np.roll(rows, -1)
        nxt[-1] = rows[-2]
        ok = np.array([tgt[a] != tgt[b] for a, b in zip(rows, nxt)])
        partner[rows[ok]] = nxt[ok]
    return partner


def partial_translation(text: str, rng: np.random.Generator) -> str | None:
    """`text` with a clause dropped (the last one), or the last 30–50 % of its words; None if too short."""
    parts = [p for p in _CLAUSE.split(text) if p and p.strip()]
    if len(parts) >= 2 and len(" ".join(parts[:-1]).split()) >= 2:
        return " ".join(parts[:-1]).strip()
    words = text.split()
    if len(words) < 4:
        return None
    keep = max(2, int(round(len(words) * rng.uniform(0.5, 0.7))))
    return " ".join(words[:keep]) if keep < len(words) else None


def swap_detail(text: str, pool: list[str], rng: np.random.Generator) -> str | None:
    """`text` with one number, option, placeholder or name changed; None when it has none of them.
    Options and names are drawn from `pool` (other targets of the same origin)."""
    for pattern, kind in ((_NUM, "num"), (_OPTION, "opt"), (_PLACEHOLDER, "ph"), (_NAME, "name")):
        hits = list(pattern.finditer(text))
        if not hits:
            continue
        m = hits[int(rng.integers(len(hits)))]
        old = m.group(0)
        if kind == "num":
            new = str(int(old) + int(rng.integers(1, 9))) if len(old) < 9 else old[:-1] + str((int(old[-1]) + 1) % 10)
        elif kind == "ph":
            new = {"%s": "%d", "%d": "%s"}.get(old, "%s")
        else:
            others = sorted({h for p in pool for h in pattern.findall(p) if h != old})
            if not others:
                continue
            new = others[int(rng.integers(len(others)))]
        return text[: m.start()] + new + text[m.end() :]
    return None


def synthetic_targets(tgt: list[str], origins: list[str] | None, rows: np.ndarray, seed: int = 0) -> tuple[np.ndarray, list[str], list[str]]:
    """Partial and swapped targets for `rows`: (row indices, new targets, kinds). Rows that admit
    neither are skipped; each row gets one kind, partial first on even draws."""
    rng = np.random.default_rng(seed)
    groups = _groups(origins, len(tgt))
    origin_of = origins if origins is not None else [""] * len(tgt)
    out_rows, out_tgt, kinds = [], [], []
    for i in rows:
        pool_rows = groups[origin_of[i]]
        pool = [tgt[j] for j in pool_rows[rng.integers(0, len(pool_rows), size=min(50, len(pool_rows)))]]
        order = ("partial", "swap") if rng.random() < 0.5 else ("swap", "partial")
        for kind in order:
            new = partial_translation(tgt[i], rng) if kind == "partial" else swap_detail(tgt[i], pool, rng)
            if new and new != tgt[i]:
                out_rows.append(int(i))
                out_tgt.append(new)
                kinds.append(kind)
                break
    return np.asarray(out_rows, dtype=np.int64), out_tgt, kinds


@dataclass
class NearMisses:
    """Near-miss pairs made from a corpus: row `rows[i]`'s source with `targets[i]`.

    `partner[i]` is the corpus row whose target was borrowed (fuzzy, neighbour), -1 for a target made
    here (partial, swap); `context_rows[i]` is the row whose neighbourhood the target belongs to (the
    partner, or the row itself), for the margin score."""

    rows: np.ndarray
    partner: np.ndarray
    targets: list[str]
    kinds: list[str]

    @property
    def context_rows(self) -> np.ndarray:
        return np.where(self.partner >= 0, self.partner, self.rows)

    def __len__(self) -> int:
        return len(self.rows)


def near_miss_pairs(src: list[str], tgt: list[str], origins: list[str] | None, seed: int = 0,
                    synthetic_rows: int = 0, max_fuzzy_rows: int = NEAR_MISS_ROWS) -> NearMisses:
    """Fuzzy pairs for the rows that have a partner (in windows holding up to `max_fuzzy_rows` rows, drawn with
    `seed`), neighbour pairs for every row that has one, then partial/swapped targets for up to `synthetic_rows`
    random rows (the same draw for the same seed)."""
    rows, partner, targets, kinds = [], [], [], []
    fuzzy = fuzzy_partners(src, tgt, origins, max_rows=max_fuzzy_rows, seed=seed)
    for kind, part in (("fuzzy", fuzzy), ("neighbour", neighbour_partners(tgt, origins))):
        ok = np.flatnonzero(part >= 0)
        rows.append(ok)
        partner.append(part[ok])
        targets += [tgt[j] for j in part[ok]]
        kinds += [kind] * len(ok)
    if synthetic_rows > 0 and len(tgt):
        rng = np.random.default_rng(seed)
        pick = np.sort(rng.choice(len(tgt), size=min(synthetic_rows, len(tgt)), replace=False))
        srows, stgt, skinds = synthetic_targets(tgt, origins, pick, seed)
        rows.append(srows)
        partner.append(np.full(len(srows), -1, dtype=np.int64))
        targets += stgt
        kinds += skinds
    cat = lambda parts: np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)  # noqa: E731
    return NearMisses(cat(rows), cat(partner), targets, kinds)
