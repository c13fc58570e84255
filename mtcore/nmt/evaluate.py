"""Score a checkpoint on a test corpus with sacreBLEU.

    python -m mtcore.evaluate --model DIR --test data/test.parquet [--beam 5] [--limit N] [--reverse]

The corpus columns are (src, tgt) = (en, vi) by convention. The model's direction comes
from its config; `--direction vi-en` or `--reverse` translates the other way by swapping
the columns (and must match the model's direction).
"""

from __future__ import annotations

import argparse
import sys
import time

from mtcore.errors import entry_point
from mtcore.data import paths
from mtcore import checks
from mtcore.nmt.checkpoint import CheckpointError, load_checkpoint
from mtcore.data.corpus import read_corpus
from mtcore.nmt.decoding import translate
from mtcore.nmt.metrics import corpus_bleu, corpus_chrf
from mtcore.nmt.translate import check_decoding_args, decoding_args, decoding_kwargs

CORPUS_LANGS = ("en", "vi")  # column order of the platform's corpora


@entry_point
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mtcore.evaluate", description=__doc__.split("\n")[0])
    decoding_args(parser)
    parser.add_argument("--test", default=str(paths.TEST), help="parallel corpus (any format mtcore.data.corpus reads)")
    parser.add_argument("--limit", type=int, default=0, help="first N pairs only (0 = all)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--direction", help="SRC-TGT, e.g. vi-en (default: the model's)")
    group.add_argument("--reverse", action="store_true", help="translate tgt -> src (vi -> en)")
    parser.add_argument("--samples", type=int, default=5, help="sample translations to print")
    args = parser.parse_args(argv)
    check_decoding_args(args)
    checks.at_least("--limit", args.limit, 0)
    checks.at_least("--samples", args.samples, 0)

    ckpt = load_checkpoint(args.model, device=args.device)
    model_dir = ckpt.model_cfg.direction
    direction = args.direction or ("-".join(CORPUS_LANGS[::-1]) if args.reverse else model_dir)
    if direction != model_dir:
        hint = "a reverse model: pass --reverse" if model_dir == "-".join(CORPUS_LANGS[::-1]) else f"pass --direction {model_dir}"
        raise CheckpointError(f"{args.model}: the model translates {model_dir}, not {direction} ({hint})")
    table = read_corpus(args.test)
    if args.limit:
        table = table.slice(0, args.limit)
    src, tgt = table.column("src").to_pylist(), table.column("tgt").to_pylist()
    if direction == "-".join(CORPUS_LANGS[::-1]):
        src, tgt = tgt, src
    elif direction != "-".join(CORPUS_LANGS):
        parser.error(f"direction {direction} is neither {'-'.join(CORPUS_LANGS)} nor its reverse")

    t0 = time.perf_counter()
    hyps = translate(ckpt.model, ckpt.tokenizer, src, **decoding_kwargs(args))
    elapsed = time.perf_counter() - t0
    bleu, chrf = corpus_bleu(hyps, tgt), corpus_chrf(hyps, tgt)
    print(f"model      {args.model} ({direction}, step {ckpt.meta.get('step')})")
    print(f"test       {args.test} ({len(src)} pairs), beam {args.beam}, {len(src) / elapsed:.1f} sentences/s")
    print(f"BLEU       {bleu.score:.2f}  {bleu.signature}")
    print(f"chrF       {chrf.score:.2f}  {chrf.signature}")
    for s, h, r in list(zip(src, hyps, tgt))[: args.samples]:
        print(f"\nSRC  {s}\nHYP  {h}\nREF  {r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
