"""Back-translation augmentation on Ray Data: the platform's main data job.

    python pipelines/backtranslate.py                       # the embedded corpus and monolingual Vietnamese
    python pipelines/backtranslate.py --mode beam --tag --ratio 0.5 --output runs/bt-tagged
    python pipelines/backtranslate.py --reverse-model runs:/RUN_ID --mono my_vi.txt   # that run's best checkpoint

Stages: clean → align-filter → reverse (vi→en) model → select monolingual → back-translate
→ filter synthetic pairs → assemble OUT/augmented/. A rerun with the same --output reuses
finished stages; an interrupted run restarts where it stopped.
"""

from __future__ import annotations

import argparse
import sys

from mtcore.data.text_export import FORMATS, export_text
from mtcore.console import add_common_options
from mtcore.errors import entry_point
from mtcore.backtranslation import MODES, BTConfig, run_backtranslation
from mtcore.backtranslation.config import ALIGN_SCORES
from mtcore.backtranslation.pipeline import stage_table


def build_parser() -> argparse.ArgumentParser:
    """The command line (the tests parse every documented command with it)."""
    DEFAULTS = BTConfig()  # here, not at import: its output lies under --home, which is read before main runs
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=DEFAULTS.corpus, help="raw parallel corpus (default: %(default)s)")
    ap.add_argument("--mono", default=DEFAULTS.mono, help="monolingual Vietnamese: Parquet `text` column or one sentence a line (default: %(default)s)")
    ap.add_argument("--reverse-model", default=DEFAULTS.reverse_model, help="vi→en checkpoint DIR, MLflow model URI, or 'train' (default)")
    ap.add_argument("--mode", choices=MODES, default=DEFAULTS.mode, help="beam, sample (top-k) or noised beam (default: %(default)s)")
    ap.add_argument("--tag", action=argparse.BooleanOptionalAction, default=DEFAULTS.tag, help="prefix synthetic sources with <bt> (tagged BT; default: off)")
    ap.add_argument("--ratio", type=float, default=DEFAULTS.ratio, help="at most R synthetic pairs per real pair (default: %(default)s)")
    ap.add_argument("--max-mono", type=int, default=DEFAULTS.max_mono, help="cap on sentences back-translated, 0 = none (default: %(default)s)")
    ap.add_argument("--upsample", type=int, default=DEFAULTS.upsample, help="copies of each real pair (default: %(default)s)")
    ap.add_argument("--reverse-steps", type=int, default=None,
                    help=f"training steps of the reverse model (default: {DEFAULTS.reverse_steps}, 24 minutes of `mini` on 2 "
                         "busy CPU cores; 0 = a clock budget, --reverse-minutes)")
    ap.add_argument("--reverse-minutes", type=float, default=None,
                    help="the reverse model's budget in minutes instead of steps (alone, or with --reverse-steps 0; "
                         f"default with --reverse-steps 0: {DEFAULTS.reverse_minutes:g})")
    ap.add_argument("--reverse-preset", default=DEFAULTS.reverse_preset, help="model preset of the reverse model (default: %(default)s)")
    ap.add_argument("--reverse-train-limit", type=int, default=0, help="first N aligned pairs for the reverse model (0 = all)")
    ap.add_argument("--reverse-vocab", type=int, default=DEFAULTS.reverse_vocab,
                    help="SentencePiece vocabulary of the reverse model (default: %(default)s)")
    ap.add_argument("--encoder", default=DEFAULTS.encoder, help="sentence encoder for alignment scores (default: builtin)")
    ap.add_argument("--align-score", choices=ALIGN_SCORES, default=DEFAULTS.align_score,
                    help="the align-filter stage's score: margin, cosine, or the pair classifier beside the encoder "
                         "(trained on first use for the built-in one) (default: %(default)s)")
    ap.add_argument("--clean-config", default=None, metavar="YAML",
                    help="cleaning rules for the corpus and the synthetic pairs (default: mtcore's); its TestOverlap "
                         "paths keep your own dev/test sentences out of the training data and the back-translated ones")
    ap.add_argument("--output", default=DEFAULTS.output, help="output directory (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=DEFAULTS.seed)
    ap.add_argument("--overwrite", action="store_true", help="redo every stage")
    ap.add_argument("--reuse-from", default="", metavar="DIR",
                    help="another run's --output: its finished stages made with the same settings are used in place")
    ap.add_argument("--format", choices=FORMATS, default="parquet", help="also write the augmented set as OUTPUT/augmented.tsv "
                    "(tsv) or OUTPUT/augmented.en + OUTPUT/augmented.vi (txt) (default: Parquet only)")
    add_common_options(ap)
    return ap


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, with the reverse model's one budget: --reverse-minutes alone is a clock budget (it was read only
    beside --reverse-steps 0, and otherwise went unused without a word)."""
    parser, defaults = build_parser(), BTConfig()
    args = parser.parse_args(argv)
    if args.reverse_minutes is not None and args.reverse_steps:
        parser.error(f"--reverse-minutes {args.reverse_minutes:g} and --reverse-steps {args.reverse_steps}: give one "
                     "budget (minutes alone, or steps)")
    if args.reverse_steps is None:
        args.reverse_steps = 0 if args.reverse_minutes is not None else defaults.reverse_steps
    if args.reverse_minutes is None:
        args.reverse_minutes = defaults.reverse_minutes
    return args


@entry_point
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cfg = BTConfig(
        corpus=args.corpus, mono=args.mono, output=args.output, reverse_model=args.reverse_model, mode=args.mode,
        tag=args.tag, ratio=args.ratio, max_mono=args.max_mono, upsample=args.upsample, encoder=args.encoder,
        align_score=args.align_score,
        reverse_minutes=args.reverse_minutes, reverse_steps=args.reverse_steps, reverse_preset=args.reverse_preset,
        reverse_train_limit=args.reverse_train_limit, reverse_vocab=args.reverse_vocab, seed=args.seed, overwrite=args.overwrite,
        reuse_from=args.reuse_from, clean_config=args.clean_config,
    )
    result = run_backtranslation(cfg)
    print(stage_table(result))
    print(f"\naugmented training set → {result.augmented}")
    for path in export_text(result.augmented, args.format, result.output / "augmented"):
        print(f"augmented set as text → {path}")
    print(f"report → {result.output / 'report.json'}   ({result.elapsed_s / 60:.1f} min; MLflow run {result.mlflow_run_id})")
    print(f"\nnext: python experiments/train_transformer.py --data {result.output}"
          f"\n  or: python experiments/tune_transformer.py --data {result.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
