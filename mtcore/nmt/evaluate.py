"""Score a checkpoint on a test corpus with sacreBLEU.

    python -m mtcore.evaluate --model DIR --test data/test.parquet [--beam 5] [--limit N] [--reverse]

The corpus columns are (src, tgt) = (en, vi) by convention for an en/vi model, and in the model's
own direction for any other pair (`--corpus-langs de-en` says otherwise). The model's direction
comes from its config; `--direction vi-en` or `--reverse` translates the other way by swapping
the columns (and must match the model's direction).

Decoding as `python -m mtcore.translate`: the length penalty and bound default to the ones the run decoded
its own test set with (its train.len_penalty, train.max_len_a/b); the settings used are printed above the
scores, which hold for them only.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path

from mtcore.console import add_common_options, program, quiet
from mtcore.errors import entry_point
from mtcore.data import paths
from mtcore import checks
from mtcore.nmt.checkpoint import CheckpointError, checkpoint_dir, load_checkpoint
from mtcore.data.corpus import read_corpus
from mtcore.data.langid import other_language
from mtcore.nmt.metrics import bleu_tokenize, corpus_bleu, corpus_chrf, evenly_spaced
from mtcore.nmt.training import EMBEDDED_LANGS, corpus_languages, oriented_pairs
from mtcore.runs import recorded_languages
from mtcore.nmt.translate import (check_beam_fits, check_decoding_args, decoding_args, describe_decoding, in_chunks,
                                  is_blank, sampling_generator, stderr_line, translate_lines)


@entry_point
def main(argv: list[str] | None = None, *, resolve: Callable[[str], Path] | None = None) -> int:
    """`resolve`: an MLflow `runs:/…` reference → a local checkpoint (the `mtcore.X` entry point passes the tracking layer's)."""
    parser = argparse.ArgumentParser(prog=program("python -m mtcore.evaluate"), description=__doc__.split("\n")[0])
    decoding_args(parser)
    parser.add_argument("--test", default=str(paths.TEST), help="parallel corpus (any format mtcore.data.corpus reads)")
    parser.add_argument("--limit", type=int, default=0,
                        help="N pairs spread evenly over the set, as a training run's job.test_limit takes them (0 = all)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--direction", help="SRC-TGT, e.g. vi-en (default: the model's)")
    group.add_argument("--reverse", action="store_true", help="translate tgt -> src (vi -> en)")
    parser.add_argument("--samples", type=int, default=5, help="sample translations to print")
    parser.add_argument("--corpus-langs", metavar="SRC-TGT", default="",
                        help="languages of the test corpus's src/tgt columns (default: en-vi for an en/vi model, "
                             "else the model's direction)")
    add_common_options(parser)
    args = parser.parse_args(argv)
    check_decoding_args(args)
    checks.at_least("--limit", args.limit, 0)
    checks.at_least("--samples", args.samples, 0)

    if args.corpus_langs:  # a region as OPUS writes it, as --langs takes it: en-zh_CN
        args.corpus_langs = "-".join(checks.language_pair(args.corpus_langs, "--corpus-langs"))
    ckpt = load_checkpoint(checkpoint_dir(args.model, resolve), device=args.device)
    check_beam_fits(args, ckpt)
    model_dir = ckpt.model_cfg.direction
    corpus = corpus_languages(ckpt.model_cfg, args.corpus_langs)
    recorded = None if args.corpus_langs else recorded_languages(args.test)  # a `clean --langs vi-en` output says so
    if recorded is not None and set(recorded) == set(corpus):
        corpus = recorded
    elif recorded is not None:
        raise CheckpointError(f"--test {args.test} holds {'-'.join(recorded)} pairs (its stage's --langs) and the model "
                              f"translates {model_dir}; give a test set of the model's languages (or --corpus-langs)")
    direction = args.direction or ("-".join(corpus[::-1]) if args.reverse else model_dir)
    if direction != model_dir:
        hint = "a reverse model: pass --reverse" if model_dir == "-".join(corpus[::-1]) else f"pass --direction {model_dir}"
        raise CheckpointError(f"{args.model}: the model translates {model_dir}, not {direction} ({hint})")
    if set(corpus) != set(EMBEDDED_LANGS) and paths.same_file(args.test, paths.TEST):
        parser.error(f"--test: the embedded test set is en-vi; give a {'-'.join(corpus)} test corpus")
    from mtcore.runs import resolve_data

    test_path = resolve_data(args.test)[0]  # a stage or job folder: the data it made, as training's --data reads it
    table = read_corpus(test_path, src_lang=corpus[0], tgt_lang=corpus[1])  # a PREFIX of PREFIX.de + PREFIX.en too
    if args.limit:
        table = table.take(evenly_spaced(len(table), args.limit))
    src, tgt = (list(side) for side in zip(*oriented_pairs(table, ckpt.model_cfg, corpus))) if len(table) else ([], [])
    empty = [i for i, ref in enumerate(tgt) if not ref.strip()]
    if tgt and len(empty) == len(tgt):
        raise checks.UsageError(f"--test {args.test}: every reference ({direction.split('-')[1]} side) is empty; nothing to score against")
    if empty:  # scored as they are: a hypothesis against an empty reference only lowers the score
        logging.getLogger(__name__).warning("--test %s: %d of %d references are empty (first: pair %d); they lower BLEU and chrF",
                                            args.test, len(empty), len(tgt), empty[0] + 1)

    if other := other_language(tgt, ckpt.model_cfg.tgt_lang):  # said, not refused: the user may know better
        logging.getLogger(__name__).warning("--test %s: its references read as %s, not %s, the model's target language: "
                                            "the test set of another pair? BLEU against them measures nothing",
                                            args.test, other, ckpt.model_cfg.tgt_lang)
    if blank := [i for i, s in enumerate(src) if is_blank(s)]:  # translate_lines gives them a blank hypothesis
        logging.getLogger(__name__).warning("--test %s: %d of %d sources are blank (first: pair %d); their hypotheses "
                                            "are blank", args.test, len(blank), len(src), blank[0] + 1)

    t0 = time.perf_counter()
    generator = sampling_generator(args)
    rows = in_chunks(src, lambda chunk, start: translate_lines(ckpt, chunk, args, list(range(start + 1, start + 1 + len(chunk))),
                                                               generator), None if quiet() else stderr_line, unit="pairs")
    hyps = [row[-1] for row in rows]
    elapsed = time.perf_counter() - t0
    bleu, chrf = corpus_bleu(hyps, tgt, tokenize=bleu_tokenize(ckpt.model_cfg.tgt_lang)), corpus_chrf(hyps, tgt)
    print(f"model      {args.model} ({direction}, step {ckpt.meta.get('step')})")
    print(f"test       {args.test} ({len(src)} pairs), {len(src) / elapsed:.1f} sentences/s")
    print(f"decoding   {describe_decoding(args, ckpt)}")  # the scores below hold for these settings only
    print(f"BLEU       {bleu.score:.2f}  {bleu.signature}")
    print(f"chrF       {chrf.score:.2f}  {chrf.signature}")
    for s, h, r in list(zip(src, hyps, tgt))[: args.samples]:
        print(f"\nSRC  {s}\nHYP  {h}\nREF  {r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
