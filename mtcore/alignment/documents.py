"""Sentence alignment of two documents that translate each other (Vecalign, Thompson & Koehn 2019).

Alignments are blocks of consecutive sentences: 1-1, 1-2, 2-1, 2-2, 1-3, 3-1 (any
a-b with a, b ≥ 1 and a + b ≤ `max_size`) plus deletions 1-0 and insertions 0-1.
A block's cost is Vecalign's normalised cosine cost (`scoring.normalized_cost`):
the embedding of a multi-sentence block is the embedding of its concatenated text
(§3.1), and the normaliser compares each block with sentences sampled from the
other document, so that hub-like blocks do not look cheap. A deletion costs
`del_factor` × the median cost of random 1-1 pairs of the same two documents.
Deviation: Vecalign takes a low percentile of those random costs; but normalised
random costs bunch up near 0.5, and a block that merges a good match with a
spurious neighbour (cosine ≈ √((1 + r)/2) for random-pair cosine r when the
encoder averages) costs well below them, so under that rule a deletion next to a
1-1 always turned into a 2-1 (our planted-deletion test shows it). A fraction of
the median keeps deletions cheaper than such merges.

Short documents: both estimates sample "random" pairs from the two documents, and in
a document of a few sentences most of those are the true pairs (in a one-sentence
pair, all: every 1-1 then costs exactly 0.5 and a deletion 0.2, so the pair was
dropped). Documents shorter than `min_random` (5, the best of 0/5/10/20/30/60 on
`benchmarks/align_quality.py --only-documents`) sentences are topped up with
background sentences (by default the embedded Debian guide, English and Vietnamese
pooled; for the built-in encoder random pairs score about as low within a language as
across, cosine 0.08–0.09), so that "random" means unrelated text, as in a long
document. Vecalign has the same blind spot (it samples from the documents only).

Dynamic programming finds the cheapest monotone path of blocks. To stay
linear-ish in length (§3.2), long documents are first aligned at a coarse
resolution: the sentence vectors are averaged over windows of `r` sentences, the
coarse documents are aligned (recursively, in the same way), and the fine search
is restricted to a band of `band` sentences around the projected coarse path.
Deviation: Vecalign halves the resolution at each level; we jump straight to
the resolution where a dense search is cheap, which is one or two levels for
documents of a few thousand sentences.
"""

from __future__ import annotations

import functools
import json
import math
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mtcore import checks
from mtcore.alignment.scoring import l2_normalize

log = logging.getLogger(__name__)
INF = float("inf")
MAX_BLOCK = 10  # largest --max-size (a + b): 47 move types, which the back-pointers' int8 holds
OUTPUT_SUFFIXES = (".jsonl", ".tsv", ".vecalign")


@dataclass
class DocAlignConfig:
    # a + b ≤ 3: 1-1, 1-2, 2-1. Vecalign's default is 4 (also 2-2, 1-3, 3-1); 3 measured better on every document
    # set here (benchmarks/RESULTS.md, "Merges"): the pooled encoder's 2-2 blocks were mostly two 1-1 pairs glued.
    max_size: int = 3
    del_factor: float = 0.4  # deletion penalty = this × the median cost of random 1-1 pairs (see module doc)
    # Each sentence a block holds beyond 1-1 costs this × the deletion penalty. Without it (Vecalign has none) a
    # pooled encoder, whose block vector is mostly its longest sentence's, let a long pair swallow a short
    # neighbouring pair that it scores poorly ("Table of Contents" / "Mục lục" beside a date line in the guide).
    # 0.5 measured best of 0–1 (synthetic documents F1 0.929 → 0.961; agreement with Gale–Church on the guide).
    merge_factor: float = 0.5
    num_samples: int = 100  # sentences sampled for the cost normaliser
    dense_cells: int = 250_000  # above this many DP cells, align coarse first
    band: int = 10  # fine search width around the projected coarse path, in sentences
    min_random: int = 5  # shorter documents borrow background sentences for the random pairs (module doc); 0: never
    seed: int = 0

    def __post_init__(self):
        # max_size 1 allows only deletions: every sentence would be dropped, silently
        checks.at_least("--max-size", self.max_size, 2)
        if self.max_size > MAX_BLOCK:  # the moves grow with its square, and each size is one more encoding pass
            raise checks.UsageError(f"--max-size: {self.max_size} is above {MAX_BLOCK}; Vecalign's default is 4")
        # 0 makes deleting every sentence free: an empty alignment (nan fails too); inf leaves no path at all
        if not 0 < self.del_factor < math.inf:
            raise checks.UsageError(f"--del-factor: {self.del_factor} is out of range; pass a finite value > 0 "
                                    f"(default 0.4)")
        for name in ("num_samples", "dense_cells", "band"):
            checks.at_least(name, getattr(self, name), 1)
        checks.at_least("min_random", self.min_random, 0)
        if not 0 <= self.merge_factor < math.inf:
            raise checks.UsageError(f"--merge-factor: {self.merge_factor} is out of range; pass a finite value >= 0")


@dataclass(frozen=True)
class Block:
    src: tuple[int, ...]
    tgt: tuple[int, ...]
    cost: float

    @property
    def kind(self) -> str:
        return f"{len(self.src)}-{len(self.tgt)}"


def alignment_types(max_size: int) -> list[tuple[int, int]]:
    types = [(1, 0), (0, 1)]
    types += [(a, b) for a in range(1, max_size) for b in range(1, max_size) if a + b <= max_size]
    return types


# --------------------------------------------------------------------------- block embeddings


def overlaps_from_text(sentences: list[str], encoder, max_n: int) -> list[np.ndarray]:
    """[None, E1, E2, …]: E_n[i] embeds the concatenation of sentences i … i+n-1 (zeros past the end)."""
    out: list[np.ndarray | None] = [None]
    for n in range(1, max_n + 1):
        texts = [" ".join(sentences[i : i + n]) for i in range(max(0, len(sentences) - n + 1))]
        emb = encoder.encode(texts) if texts else np.zeros((0, encoder.dim), np.float32)
        out.append(_pad_rows(emb, len(sentences)))
    return out


def overlaps_from_vectors(vectors: np.ndarray, max_n: int) -> list[np.ndarray]:
    """As `overlaps_from_text`, with a block's embedding the normalised mean of its sentence vectors."""
    out: list[np.ndarray | None] = [None]
    csum = np.vstack([np.zeros((1, vectors.shape[1]), np.float32), np.cumsum(vectors, axis=0, dtype=np.float64)])
    for n in range(1, max_n + 1):
        sums = csum[n:] - csum[:-n] if len(vectors) >= n else np.zeros((0, vectors.shape[1]))
        out.append(_pad_rows(l2_normalize(sums), len(vectors)))
    return out


def _pad_rows(emb: np.ndarray, n: int) -> np.ndarray:
    full = np.zeros((n, emb.shape[1]), dtype=np.float32)
    full[: len(emb)] = emb
    return full


# --------------------------------------------------------------------------- the DP


def _random_pools(xo, yo, cfg: DocAlignConfig, rng, background) -> tuple[np.ndarray, np.ndarray]:
    """Sentence vectors that stand for "a random sentence" of each side: the document's own, and for a
    document shorter than `cfg.min_random`, background sentences up to that many."""
    px, py = xo[1], yo[1]
    if background is not None:
        px, py = (_top_up(own, bg, cfg.min_random, rng) for own, bg in zip((px, py), background))
    return px, py


def _top_up(own: np.ndarray, background: np.ndarray, size: int, rng) -> np.ndarray:
    missing = min(size - len(own), len(background))
    if missing <= 0:
        return own
    return np.vstack([own, background[rng.choice(len(background), size=missing, replace=False)]])


def _normalizers(xo, yo, px, py, rng, num_samples):
    """Each block's mean cosine distance to sampled random sentences of the other side (Vecalign §3.1)."""
    xs = px[rng.choice(len(px), size=min(num_samples, len(px)), replace=False)]
    ys = py[rng.choice(len(py), size=min(num_samples, len(py)), replace=False)]
    nx = [None] + [(1.0 - e @ ys.T).mean(axis=1) for e in xo[1:]]
    ny = [None] + [(1.0 - e @ xs.T).mean(axis=1) for e in yo[1:]]
    return nx, ny, xs, ys


def _deletion_penalty(px, py, xs, ys, rng, factor) -> float:
    n = 2000
    i = rng.integers(len(px), size=n)
    j = rng.integers(len(py), size=n)
    cos = np.einsum("nd,nd->n", px[i], py[j])
    norm_x = (1.0 - px @ ys.T).mean(axis=1)  # the 1-sentence normalisers, for background rows too
    norm_y = (1.0 - py @ xs.T).mean(axis=1)
    costs = (1.0 - cos) / np.maximum(norm_x[i] + norm_y[j], 1e-6)
    return float(factor * np.median(costs))


def banded_dp(xo, yo, nx, ny, del_penalty: float, types, lo: np.ndarray, hi: np.ndarray,
              merge_penalty: float = 0.0) -> list[Block]:
    """Cheapest path from (0, 0) to (N, M) through cells lo[i] ≤ j ≤ hi[i]; returns its blocks.

    Row by row; within a row every move type is one vectorised step, and insertions
    (0-1, which chain along the row) are a running minimum.
    """
    N, M = len(xo[1]), len(yo[1])
    D = [np.full(hi[i] - lo[i] + 1, INF) for i in range(N + 1)]
    back = [np.zeros(hi[i] - lo[i] + 1, dtype=np.int8) for i in range(N + 1)]  # move codes < 128: MAX_BLOCK
    block_types = [t for t in types if t[0] > 0 and t[1] > 0]
    codes = {t: k for k, t in enumerate(types)}
    for i in range(N + 1):
        js = np.arange(lo[i], hi[i] + 1)
        best = np.full(len(js), INF)
        arg = np.zeros(len(js), dtype=np.int8)
        if i == 0:
            best[js == 0] = 0.0
        if i >= 1:  # deletion of source sentence i-1
            cand = _prev(D, lo, hi, i - 1, js) + del_penalty
            _take(best, arg, cand, codes[(1, 0)])
        for a, b in block_types:
            if i < a:
                continue
            prev = _prev(D, lo, hi, i - a, js - b)
            ok = np.isfinite(prev)
            if not ok.any():
                continue
            jj = js[ok] - b
            xv = xo[a][i - a]
            cos = yo[b][jj] @ xv
            cost = (1.0 - cos) * a * b / np.maximum(nx[a][i - a] + ny[b][jj], 1e-6) + merge_penalty * (a + b - 2)
            cand = np.full(len(js), INF)
            cand[ok] = prev[ok] + cost
            _take(best, arg, cand, codes[(a, b)])
        # insertions of target sentences: D[j] = min(best[j], D[j-1] + p), a running minimum
        ramp = np.arange(len(js)) * del_penalty
        chained = np.minimum.accumulate(best - ramp) + ramp
        from_left = chained < best - 1e-12
        best = np.where(from_left, chained, best)
        arg[from_left] = codes[(0, 1)]
        D[i], back[i] = best, arg
    return _backtrack(D, back, lo, xo, yo, nx, ny, del_penalty, merge_penalty, types, N, M)


def _prev(D, lo, hi, row, js):
    out = np.full(len(js), INF)
    ok = (js >= lo[row]) & (js <= hi[row])
    out[ok] = D[row][js[ok] - lo[row]]
    return out


def _take(best, arg, cand, code):
    better = cand < best
    best[better] = cand[better]
    arg[better] = code


def _backtrack(D, back, lo, xo, yo, nx, ny, del_penalty, merge_penalty, types, N, M) -> list[Block]:
    if not np.isfinite(D[N][M - lo[N]]):
        raise RuntimeError("no alignment path inside the search band")  # cannot happen: the band holds a path
    blocks, i, j = [], N, M
    while i > 0 or j > 0:
        a, b = types[back[i][j - lo[i]]]
        if a and b:
            cos = float(xo[a][i - a] @ yo[b][j - b])
            cost = (1.0 - cos) * a * b / max(nx[a][i - a] + ny[b][j - b], 1e-6) + merge_penalty * (a + b - 2)
        else:
            cost = del_penalty
        blocks.append(Block(tuple(range(i - a, i)), tuple(range(j - b, j)), float(cost)))
        i, j = i - a, j - b
    return blocks[::-1]


# --------------------------------------------------------------------------- coarse to fine


def _band_from_path(blocks: list[Block], scale: int, N: int, M: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of the fine lattice allowed around a coarse path whose units are `scale` sentences."""
    points = [(0, 0)]
    for blk in blocks:
        i0, j0 = points[-1]
        points.append((i0 + len(blk.src), j0 + len(blk.tgt)))
    path_lo = np.full(N + 1, M, dtype=np.int64)
    path_hi = np.zeros(N + 1, dtype=np.int64)
    for (ci0, cj0), (ci1, cj1) in zip(points, points[1:]):
        i0, i1 = min(ci0 * scale, N), min(ci1 * scale, N)
        j0, j1 = min(cj0 * scale, M), min(cj1 * scale, M)
        for i in range(i0, i1 + 1):
            t = (i - i0) / (i1 - i0) if i1 > i0 else None
            ja, jb = (j0, j1) if t is None else (int(j0 + t * (j1 - j0)), int(np.ceil(j0 + t * (j1 - j0))))
            path_lo[i] = min(path_lo[i], ja)
            path_hi[i] = max(path_hi[i], jb)
    path_lo[N], path_hi[N] = min(path_lo[N], M), M
    path_lo[0] = 0
    lo = np.empty(N + 1, dtype=np.int64)
    hi = np.empty(N + 1, dtype=np.int64)
    for i in range(N + 1):
        a, b = max(0, i - width), min(N, i + width)
        lo[i] = max(0, path_lo[a : b + 1].min() - width)
        hi[i] = min(M, path_hi[a : b + 1].max() + width)
    return lo, hi


def align_vectors(xo, yo, cfg: DocAlignConfig, rng: np.random.Generator | None = None,
                  background: tuple[np.ndarray, np.ndarray] | None = None) -> list[Block]:
    """Align two documents given their block embeddings (`overlaps_from_*`), coarse to fine when long.

    `background`: sentence vectors of unrelated text per side, to top up short documents' random pairs."""
    rng = rng or np.random.default_rng(cfg.seed)
    N, M = len(xo[1]), len(yo[1])
    types = alignment_types(cfg.max_size)
    if N == 0 or M == 0:
        return [Block((i,), (), 0.0) for i in range(N)] + [Block((), (j,), 0.0) for j in range(M)]
    px, py = _random_pools(xo, yo, cfg, rng, background)
    nx, ny, xs, ys = _normalizers(xo, yo, px, py, rng, cfg.num_samples)
    del_penalty = _deletion_penalty(px, py, xs, ys, rng, cfg.del_factor)
    if (N + 1) * (M + 1) <= cfg.dense_cells:
        lo, hi = np.zeros(N + 1, dtype=np.int64), np.full(N + 1, M, dtype=np.int64)
    else:
        scale = int(np.ceil(np.sqrt((N + 1) * (M + 1) / cfg.dense_cells)))
        coarse_x = _downsample(xo[1], scale)
        coarse_y = _downsample(yo[1], scale)
        coarse = align_vectors(
            overlaps_from_vectors(coarse_x, cfg.max_size - 1), overlaps_from_vectors(coarse_y, cfg.max_size - 1), cfg, rng
        )
        lo, hi = _band_from_path(coarse, scale, N, M, max(cfg.band, scale))
    # at least a tie-break: on (near) ties, e.g. identical section numbers, smaller blocks win
    merge_penalty = max(cfg.merge_factor * del_penalty, 1e-4)
    return banded_dp(xo, yo, nx, ny, del_penalty, types, lo, hi, merge_penalty)


def _downsample(vectors: np.ndarray, scale: int) -> np.ndarray:
    n = int(np.ceil(len(vectors) / scale))
    padded = np.zeros((n * scale, vectors.shape[1]), dtype=np.float32)
    padded[: len(vectors)] = vectors
    return l2_normalize(padded.reshape(n, scale, -1).sum(axis=1))


def align_documents(src: list[str], tgt: list[str], encoder, cfg: DocAlignConfig | None = None,
                    background: tuple[list[str], list[str]] | None = None) -> list[Block]:
    """Align the sentences of two documents; blocks in order, covering every sentence exactly once.

    `background`: unrelated sentences in the source and target languages, used only when a document is
    shorter than `cfg.min_random` sentences; default `default_background()`."""
    cfg = cfg or DocAlignConfig()
    max_n = cfg.max_size - 1
    vectors = None
    if min(len(src), len(tgt)) < cfg.min_random:
        texts = background or default_background(cfg.min_random, cfg.seed)
        if texts is not None:
            vectors = tuple(_encode(encoder, side) for side in texts)
    return align_vectors(overlaps_from_text(src, encoder, max_n), overlaps_from_text(tgt, encoder, max_n), cfg,
                         background=vectors)


def _encode(encoder, texts: list[str]) -> np.ndarray:
    return encoder.encode(texts) if texts else np.zeros((0, encoder.dim), np.float32)


def default_background(n: int, seed: int = 0) -> tuple[list[str], list[str]] | None:
    """n random sentences of the embedded Debian guide for each side, English and Vietnamese pooled
    (the documents' languages are not known here), or None when the guide is not there."""
    pool = _guide_sentences()
    if not pool:
        return None
    picks = np.random.default_rng(seed).choice(len(pool), size=min(2 * n, len(pool)), replace=False)
    sample = [pool[i] for i in picks]
    return sample[:n], sample[n:]


@functools.lru_cache(maxsize=1)
def _guide_sentences() -> tuple[str, ...]:
    from mtcore.data.paths import DATA_DIR

    paths = [DATA_DIR / "docs" / f"maint-guide.{lang}.txt" for lang in ("en", "vi")]
    if not all(p.is_file() for p in paths):
        log.warning("no background sentences (%s missing): short documents are aligned on their own sentences", paths[0].parent)
        return ()
    return tuple(s for p in paths for s in read_document(p) if len(s.split()) >= 4)  # sentences, not headings


# --------------------------------------------------------------------------- documents in and out


_ABBREV = re.compile(r"(\b(e\.g|i\.e|etc|vs|cf|vv|Mr|Dr|No|v\.v)\.|\b[A-Z]\.)$")


_SECTION_NUMBER = re.compile(r"^(\d+|[A-Z])(\.\d+)*\.$")  # "1.", "1.1.", "A.2.": a heading's number, not a sentence


# Chinese and Japanese end a sentence with 。！？ (and a closing quote or bracket), with no space after: every
# Chinese paragraph stayed one sentence, and no sentence of it could be aligned.
_CJK_END = re.compile(r"(?<=[。！？])(?![。！？」』”’）)\]\"'])\s*|(?<=[。！？][」』”’）)\]\"'])\s*")  # ？！ is one end


def split_sentences(paragraph: str) -> list[str]:
    """Split after 。！？ (Chinese, Japanese); and on . ! ? (and a closing quote or bracket after them) followed by
    space and a capital, digit, quote or bullet; not after known abbreviations, nor after a heading's section number."""
    return [s for segment in _CJK_END.split(paragraph.strip()) if segment for s in _split_spaced(segment)]


def _split_spaced(paragraph: str) -> list[str]:
    pieces = re.split(r"(?<=[.!?])\s+|(?<=[.!?][\"'”’»)\]])\s+", paragraph.strip())
    out: list[str] = []
    for piece in pieces:
        if out and (not piece[:1].isupper() and not piece[:1].isdigit() and piece[:1] not in "\"'“(*+-"
                    or _ABBREV.search(out[-1]) or _SECTION_NUMBER.match(out[-1])):
            out[-1] = f"{out[-1]} {piece}"
        else:
            out.append(piece)
    return [s for s in out if s]


_BULLET = re.compile(r"^\s*([*+•-]|\d+\.)\s+")


def read_document(path: str | Path, split: str = "auto") -> list[str]:
    """Sentences of a plain-text document.

    `lines`: one sentence per line (blank lines skipped). `sentences`: paragraphs
    (separated by blank lines or starting with a bullet) are unwrapped and split into
    sentences. `paragraphs`: each line is a paragraph (text extracted from HTML, a
    Wikipedia dump), split into sentences. `auto`: see `auto_split`.
    """
    from mtcore.data.corpus import CorpusError, _decode_lines

    path = Path(path)
    if path.is_dir():
        raise CorpusError(f"{path}: a directory; pass a text file (one document)")
    if not path.is_file():
        raise CorpusError(f"{path}: file not found")
    lines = _decode_lines(path)
    if not any(ln.strip() for ln in lines):  # nothing to align: an error, not an alignment of deletions
        raise CorpusError(f"{path}: the document holds no text")
    if split == "auto":
        split = auto_split(lines)
    if split == "lines":
        return [ln.strip() for ln in lines if ln.strip()]
    if split == "paragraphs":
        return [s for ln in lines if ln.strip() for s in split_sentences(" ".join(ln.split()))]
    if split != "sentences":
        raise ValueError(f"split must be 'auto', 'lines', 'sentences' or 'paragraphs', not {split!r}")
    paragraphs, current = [], []
    for ln in lines:
        if not ln.strip() or _BULLET.match(ln):
            if current:
                paragraphs.append(" ".join(current))
            current = [ln.strip()] if ln.strip() else []
        else:
            current.append(ln.strip())
    if current:
        paragraphs.append(" ".join(current))
    return [s for p in paragraphs for s in split_sentences(" ".join(p.split()))]


def _wrapped(lines: list[str]) -> bool:
    """Wrapped prose: ≥ 5 % of the lines blank (paragraph breaks); one sentence per line has next to none."""
    return bool(lines) and sum(1 for ln in lines if not ln.strip()) / len(lines) >= 0.05


def _paragraph_per_line(lines: list[str]) -> bool:
    """A paragraph a line: ≥ 25 % of the lines hold two sentences or more (one sentence per line: next to none)."""
    filled = [ln for ln in lines if ln.strip()]
    return bool(filled) and sum(1 for ln in filled if len(split_sentences(" ".join(ln.split()))) > 1) / len(filled) >= 0.25


def auto_split(lines: list[str]) -> str:
    """`sentences` for wrapped prose (`_wrapped`), `paragraphs` for a paragraph a line, else `lines`."""
    return "sentences" if _wrapped(lines) else "paragraphs" if _paragraph_per_line(lines) else "lines"


def resolve_split(paths: list[str | Path], split: str = "auto") -> str:
    """One way of cutting for every document of an alignment: `auto` looks at all of them together, so a
    translation is never cut into sentences while its source is read line by line (their blocks would not match)."""
    if split != "auto":
        return split
    from mtcore.data.corpus import _decode_lines

    files = [_decode_lines(Path(p)) for p in paths]
    pooled = auto_split([ln for lines in files for ln in lines])
    if pooled == "lines" and any(_paragraph_per_line(lines) and not _wrapped(lines) for lines in files):
        # a paragraph a line against a sentence a line: the sentence file outvoted it, and most of its sentences had
        # no counterpart; cutting a one-sentence line costs nothing
        return "paragraphs"
    return pooled


def line_numbers(path: str | Path) -> list[int]:
    """The 0-based line of the file that each sentence `read_document(path, "lines")` returns comes from."""
    from mtcore.data.corpus import _decode_lines

    return [i for i, ln in enumerate(_decode_lines(Path(path))) if ln.strip()]


def write_alignment(blocks: list[Block], src: list[str], tgt: list[str], path: str | Path,
                    numbers: tuple[list[int], list[int]] | None = None) -> Path:
    """`.vecalign`: Vecalign's own output, `[0, 1]:[0]:0.123456` a line (its score.py reads it); `.tsv`: src indices,
    tgt indices, cost, src text, tgt text (Vecalign's fields in columns, with the texts); else JSON lines.
    `numbers`: the files' line of each sentence (`line_numbers`), so that indices are the files' lines even where
    blank lines were skipped (Vecalign's gold files count every line)."""
    if numbers is not None:
        blocks = [Block(tuple(numbers[0][i] for i in b.src), tuple(numbers[1][j] for j in b.tgt), b.cost) for b in blocks]
        src_at, tgt_at = dict(zip(numbers[0], src)), dict(zip(numbers[1], tgt))
    else:
        src_at, tgt_at = dict(enumerate(src)), dict(enumerate(tgt))
    src, tgt = src_at, tgt_at
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")  # written beside, then renamed: never half a file
    with partial.open("w", encoding="utf-8") as f:
        for blk in blocks:
            s_text = " ".join(src[i] for i in blk.src)
            t_text = " ".join(tgt[j] for j in blk.tgt)
            cost = max(blk.cost, 0.0) + 0.0  # float noise below 0, and -0.0, printed as "-0.000000"
            suffix = path.suffix.lower()
            if suffix == ".vecalign":
                f.write(f"{list(blk.src)}:{list(blk.tgt)}:{cost:.6f}\n")
            elif suffix == ".tsv":
                f.write(f"{list(blk.src)}\t{list(blk.tgt)}\t{cost:.4f}\t{_tsv(s_text)}\t{_tsv(t_text)}\n")
            else:
                row = {"src": list(blk.src), "tgt": list(blk.tgt), "cost": round(cost, 4), "src_text": s_text, "tgt_text": t_text}
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    partial.replace(path)
    return path


_FIELD_BREAKS = re.compile(r"[\t\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")  # what some reader takes for a field or row end


def _tsv(text: str) -> str:
    return _FIELD_BREAKS.sub(" ", text)


def strict_f1(predicted: list[Block], gold: list[Block], include_deletions: bool = False) -> dict[str, float]:
    """Vecalign's strict score: a block counts only if it matches a gold block exactly."""

    def keyset(blocks):
        return {(b.src, b.tgt) for b in blocks if include_deletions or (b.src and b.tgt)}

    p, g = keyset(predicted), keyset(gold)
    tp = len(p & g)
    precision = tp / len(p) if p else 0.0
    recall = tp / len(g) if g else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}
