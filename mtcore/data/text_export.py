"""Stage outputs as plain text for other toolkits (fairseq, Marian, OpenNMT): a TSV or a Moses pair.

The Parquet output stays the stage's own (the next stage and training read it); `--format tsv`
adds `NAME.tsv` (src<TAB>tgt per line), `--format txt` adds `NAME.SRC` and `NAME.TGT` with line i
of one the translation of line i of the other. A tab or line break inside a sentence would break
that alignment, so it becomes a space, and the count of such rows is reported.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from mtcore.data.corpus import CorpusError, read_corpus

log = logging.getLogger(__name__)

FORMATS = ("parquet", "tsv", "txt")


def _flat(text: str) -> str:
    return " ".join(text.replace("\t", " ").splitlines())


def _columns(corpus: str | Path, langs: tuple[str, str]) -> tuple[list[str], list[str]]:
    """src and tgt of a corpus of `langs`; a stage that kept nothing is an empty export, not an error."""
    try:
        table = read_corpus(corpus, src_lang=langs[0], tgt_lang=langs[1])
    except CorpusError:
        if _parquet_rows(corpus) == 0:
            return [], []
        raise
    return table.column("src").to_pylist(), table.column("tgt").to_pylist()


def _parquet_rows(corpus: str | Path) -> int | None:
    import pyarrow.dataset as pads

    try:
        return pads.dataset(str(corpus), format="parquet").count_rows()
    except (OSError, ValueError):
        return None


def export_text(corpus: str | Path, fmt: str, dest: str | Path, langs: tuple[str, str] = ("en", "vi")) -> list[Path]:
    """Write `corpus` (any corpus path) next to `dest` as `fmt`; the files written (none for parquet)."""
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r}: choose from {list(FORMATS)}")
    if fmt == "parquet":
        return []
    src, tgt = _columns(corpus, langs)
    flat_src, flat_tgt = [_flat(s) for s in src], [_flat(t) for t in tgt]
    changed = sum(a != b or c != d for a, b, c, d in zip(src, flat_src, tgt, flat_tgt))
    if changed:
        log.warning("%d of %d rows held a tab or line break; written with a space instead", changed, len(src))
    dest = Path(dest)
    if fmt == "tsv":
        files = {dest.with_name(dest.name + ".tsv"): [f"{s}\t{t}" for s, t in zip(flat_src, flat_tgt)]}
    else:
        files = {dest.with_name(f"{dest.name}.{langs[0]}"): flat_src, dest.with_name(f"{dest.name}.{langs[1]}"): flat_tgt}
    for path, lines in files.items():
        partial = path.with_name(path.name + ".partial")
        partial.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        os.replace(partial, path)
    return list(files)
