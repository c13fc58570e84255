"""Align the sentences of two documents that translate each other (Vecalign-style, coarse to fine).

    python pipelines/align_docs.py          # data/docs/maint-guide.{en,vi}.txt → runs/align_docs/maint-guide.jsonl
    python pipelines/align_docs.py --src guide.en.txt --tgt guide.vi.txt --output guide.tsv [--split lines]

Output: one aligned block per line (source indices, target indices, cost, texts): FILE.jsonl (JSON lines), FILE.tsv
(tab-separated columns) or FILE.vecalign (Vecalign's own `[i]:[j]:cost` lines, whose indices are the input files'
lines). The default output is runs/align_docs/NAME.jsonl, NAME from --src.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections import Counter
from pathlib import Path

from mtcore import checks
from mtcore.console import add_common_options, progress_line
from mtcore.errors import entry_point
from mtcore.alignment.documents import (
    OUTPUT_SUFFIXES,
    DocAlignConfig,
    align_documents,
    line_numbers,
    read_document,
    resolve_split,
    write_alignment,
)
from mtcore.embedding import check_encoder, load_encoder
from mtcore.data.paths import DATA_DIR
from mtcore.runs import home

log = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    """The command line (the tests parse every documented command with it)."""
    d = DocAlignConfig()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", default=str(DATA_DIR / "docs" / "maint-guide.en.txt"))
    ap.add_argument("--tgt", default=str(DATA_DIR / "docs" / "maint-guide.vi.txt"))
    ap.add_argument("--output", help="FILE.jsonl (blocks with texts), FILE.tsv, or FILE.vecalign (Vecalign's own "
                                     "[i]:[j]:cost lines, for its score.py) (default: runs/align_docs/NAME.jsonl, NAME "
                                     "the --src file's name without its suffixes: maint-guide.jsonl for the default)")
    ap.add_argument("--encoder", default="builtin", help="'builtin', an encoder DIR, or a sentence-transformers name/path")
    ap.add_argument("--split", default="auto", choices=("auto", "lines", "sentences", "paragraphs"), help="how to cut the files into sentences: lines (one a line, indices are the files' lines), sentences (paragraphs unwrapped and split), paragraphs (a paragraph a line, split), auto (sentences when ≥ 5 %% of the two files' lines are blank, paragraphs when ≥ 25 %% of their lines hold two sentences or more, else lines) (default: %(default)s)")
    ap.add_argument("--max-size", type=int, default=d.max_size, help="largest block a+b (default: %(default)s)")
    ap.add_argument("--del-factor", type=float, default=d.del_factor, help="deletion penalty, × the median cost of random 1-1 pairs (default: %(default)s)")
    ap.add_argument("--merge-factor", type=float, default=d.merge_factor,
                    help="cost of each sentence a block holds beyond 1-1, × the deletion penalty (default: %(default)s)")
    ap.add_argument("--background", nargs=2, metavar=("SRC_TXT", "TGT_TXT"),
                    help=f"unrelated text in the two languages, for documents under {d.min_random} sentences "
                         "(default: the embedded Debian guide, en and vi)")
    add_common_options(ap)
    return ap


@entry_point
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cfg = DocAlignConfig(max_size=args.max_size, del_factor=args.del_factor, merge_factor=args.merge_factor)  # checked before any work
    inputs = {"--src": args.src, "--tgt": args.tgt}
    if args.background:
        inputs |= {"--background SRC_TXT": args.background[0], "--background TGT_TXT": args.background[1]}
    output = Path(args.output) if args.output else default_output(args.src)
    checks.output_apart(output, inputs)  # --output one.en would overwrite the document it reads
    check_output(output, args.split)
    split = "lines" if output.suffix.lower() == ".vecalign" else resolve_split([args.src, args.tgt], args.split)
    src, tgt = read_document(args.src, split), read_document(args.tgt, split)
    background = tuple(read_document(path, args.split) for path in args.background) if args.background else None
    check_encoder(args.encoder)  # a folder that is no encoder named as such, not as a missing package
    encoder = load_encoder(args.encoder)
    progress_line(f"aligning {len(src):,} source and {len(tgt):,} target sentences (--split {split}): encoding blocks "
                  f"of up to {cfg.max_size - 1} sentences, then the search")
    t0 = time.perf_counter()
    blocks = align_documents(src, tgt, encoder, cfg, background)
    seconds = time.perf_counter() - t0
    numbers = (line_numbers(args.src), line_numbers(args.tgt)) if split == "lines" else None
    path = write_alignment(blocks, src, tgt, output, numbers)
    kinds = Counter(b.kind for b in blocks)
    warn_unaligned(blocks, len(src), len(tgt), split)
    print(f"{len(src):,} source and {len(tgt):,} target sentences → {len(blocks):,} blocks in {seconds:.1f} s "
          f"(--split {split}{' (auto)' if args.split == 'auto' else ''})")
    print("blocks: " + ", ".join(f"{k} {n:,}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1])))
    if numbers is not None:
        print("indices: the files' lines, from 0" + (" (blank lines are in no block)" if max(numbers[0][-1] + 1 - len(src), numbers[1][-1] + 1 - len(tgt)) else ""))
    else:
        how = "each line was cut into sentences" if split == "paragraphs" else "paragraphs were unwrapped and cut into sentences"
        print(f"indices: sentences, from 0 ({how}; --split lines reads a line as one)")
    print(f"alignment → {path}")
    return 0


def default_output(src: str) -> Path:
    """runs/align_docs/NAME.jsonl for --src NAME.en.txt (the default guide keeps its maint-guide.jsonl)."""
    name = Path(src).name.split(".")[0] or "alignment"
    return home() / "align_docs" / f"{name}.jsonl"


def check_output(output: Path, split: str) -> None:
    """Before any work: a file path, of a known format, that can be written."""
    if output.suffix.lower() not in OUTPUT_SUFFIXES:
        raise checks.UsageError(f"--output: {output}: name it .jsonl, .tsv or .vecalign (the format follows the suffix)")
    if output.suffix.lower() == ".vecalign" and split not in ("auto", "lines"):
        raise checks.UsageError(f"--output {output}: a .vecalign file's indices are the input files' lines, so it needs "
                                f"--split lines; with --split {split} write .jsonl or .tsv, which carry the sentences")
    if output.is_dir():
        raise checks.UsageError(f"--output: {output} is a directory; pass a file path ({', '.join(OUTPUT_SUFFIXES)})")
    checks.output_dir(output.parent)  # a parent that is a file, or not writable: now, not after the encoding


def warn_unaligned(blocks, n_src: int, n_tgt: int, split: str, most: float = 1 / 3) -> None:
    """Documents that translate each other leave few sentences out; most left out means they do not, or that they
    are cut differently (a paragraph a line against a sentence a line)."""
    left_src = sum(len(b.src) for b in blocks if not b.tgt) / max(n_src, 1)
    left_tgt = sum(len(b.tgt) for b in blocks if not b.src) / max(n_tgt, 1)
    if max(left_src, left_tgt) > most:
        log.warning("%.0f %% of the source and %.0f %% of the target sentences have no counterpart: the documents may "
                    "not translate each other, or they are cut differently (--split %s; try another --split)",
                    100 * left_src, 100 * left_tgt, split)


if __name__ == "__main__":
    sys.exit(main())
