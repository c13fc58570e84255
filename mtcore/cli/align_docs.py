"""Align the sentences of two documents that translate each other (Vecalign-style, coarse to fine).

    python pipelines/align_docs.py          # data/docs/maint-guide.{en,vi}.txt → runs/align_docs/maint-guide.jsonl
    python pipelines/align_docs.py --src guide.en.txt --tgt guide.vi.txt --output guide.tsv [--split lines]

Output: one aligned block per line (source indices, target indices, cost, texts);
`.tsv` gives tab-separated columns, anything else JSON lines.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

from mtcore import checks
from mtcore.console import add_common_options
from mtcore.errors import entry_point
from mtcore.alignment.documents import DocAlignConfig, align_documents, line_numbers, read_document, resolve_split, write_alignment
from mtcore.embedding import check_encoder, load_encoder
from mtcore.data.paths import DATA_DIR
from mtcore.runs import home


def build_parser() -> argparse.ArgumentParser:
    """The command line (the tests parse every documented command with it)."""
    d = DocAlignConfig()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", default=str(DATA_DIR / "docs" / "maint-guide.en.txt"))
    ap.add_argument("--tgt", default=str(DATA_DIR / "docs" / "maint-guide.vi.txt"))
    ap.add_argument("--output", default=str(home() / "align_docs" / "maint-guide.jsonl"),
                    help="FILE.jsonl (blocks with texts), FILE.tsv, or FILE.vecalign (Vecalign's own [i]:[j]:cost lines, "
                         "for its score.py) (default: %(default)s)")
    ap.add_argument("--encoder", default="builtin", help="'builtin', an encoder DIR, or a sentence-transformers name/path")
    ap.add_argument("--split", default="auto", choices=("auto", "lines", "sentences", "paragraphs"), help="how to cut the files into sentences: lines (one a line, indices are the files' lines), sentences (paragraphs unwrapped and split), paragraphs (a paragraph a line, split), auto (sentences when ≥ 5 %% of the two files' lines are blank, paragraphs when ≥ 25 %% of their lines hold two sentences or more, else lines) (default: %(default)s)")
    ap.add_argument("--max-size", type=int, default=d.max_size, help="largest block a+b (default: %(default)s)")
    ap.add_argument("--del-factor", type=float, default=d.del_factor, help="deletion penalty, × the median cost of random 1-1 pairs (default: %(default)s)")
    ap.add_argument("--background", nargs=2, metavar=("SRC_TXT", "TGT_TXT"),
                    help=f"unrelated text in the two languages, for documents under {d.min_random} sentences "
                         "(default: the embedded Debian guide, en and vi)")
    add_common_options(ap)
    return ap


@entry_point
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cfg = DocAlignConfig(max_size=args.max_size, del_factor=args.del_factor)  # options checked before any work
    inputs = {"--src": args.src, "--tgt": args.tgt}
    if args.background:
        inputs |= {"--background SRC_TXT": args.background[0], "--background TGT_TXT": args.background[1]}
    if Path(args.output).is_dir():
        raise checks.UsageError(f"--output: {args.output} is a directory; pass a file path (.jsonl or .tsv)")
    checks.output_apart(args.output, inputs)  # --output one.en would overwrite the document it reads
    split = resolve_split([args.src, args.tgt], args.split)
    src, tgt = read_document(args.src, split), read_document(args.tgt, split)
    background = tuple(read_document(path, args.split) for path in args.background) if args.background else None
    check_encoder(args.encoder)  # a folder that is no encoder named as such, not as a missing package
    encoder = load_encoder(args.encoder)
    t0 = time.perf_counter()
    blocks = align_documents(src, tgt, encoder, cfg, background)
    seconds = time.perf_counter() - t0
    numbers = (line_numbers(args.src), line_numbers(args.tgt)) if split == "lines" else None
    path = write_alignment(blocks, src, tgt, args.output, numbers)
    kinds = Counter(b.kind for b in blocks)
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


if __name__ == "__main__":
    sys.exit(main())
