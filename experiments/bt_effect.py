"""Does back-translation help? A simulated low-resource experiment on the embedded data.

    python experiments/bt_effect.py [--share 0.1] [--steps 3000] [--seeds 0,1] [--variants real,beam_tagged,...]

Keeps `--share` of the cleaned, aligned pairs as parallel data and uses the Vietnamese side of
the rest as monolingual text; trains one vi→en reverse model on the parallel share, back-translates
in each mode, and trains en→vi models to convergence (early stopping and checkpoint choice on dev loss,
the same cap and patience for every variant) on real only and on real + synthetic pairs, once per seed. Prints test
BLEU/chrF per variant (mean and spread over seeds, gain over real only); the en→vi runs are in the MLflow
experiment `bt_effect`, the reverse model and the back-translation jobs in `backtranslate`. Interrupted, it
resumes from OUTPUT/results.jsonl.
"""

from __future__ import annotations

import argparse
import sys

from mtcore.console import add_common_options
from mtcore.errors import entry_point
from mtcore.backtranslation.experiment import VARIANTS, EffectConfig, run_effect
from mtcore.backtranslation.pipeline import run_backtranslation
from mtcore.backtranslation import BTConfig


def build_parser() -> argparse.ArgumentParser:
    """The command line (the tests parse every documented command with it)."""
    d = EffectConfig()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--share", type=float, default=d.parallel_share, help="share of real pairs kept parallel (default: %(default)s)")
    ap.add_argument("--steps", type=int, default=d.steps, help="step cap per en→vi model; early stopping usually ends it first (default: %(default)s)")
    ap.add_argument("--validate-every", type=int, default=d.validate_every, help="steps between validations (default: %(default)s)")
    ap.add_argument("--patience", type=int, default=d.patience, help="validations without a gain before stopping (default: %(default)s)")
    ap.add_argument("--best-metric", choices=("loss", "bleu"), default=d.best_metric,
                    help="dev metric that stops training and picks the checkpoint (default: %(default)s)")
    ap.add_argument("--warmup", type=int, default=d.warmup, help="warm-up steps of every en→vi model (default: %(default)s)")
    ap.add_argument("--seeds", default=",".join(map(str, d.seeds)), help="forward-model seeds (default: %(default)s)")
    ap.add_argument("--reverse-steps", type=int, default=d.reverse_steps, help="step cap of the vi→en model (default: %(default)s)")
    ap.add_argument("--max-mono", type=int, default=d.max_mono, help="cap on sentences back-translated per mode, 0 = ratio decides")
    ap.add_argument("--preset", default=d.preset, help="en→vi model preset (default: %(default)s)")
    ap.add_argument("--reverse-preset", default=d.reverse_preset, help="vi→en model preset (default: %(default)s)")
    ap.add_argument("--test-limit", type=int, default=d.test_limit)
    ap.add_argument("--dev-limit", type=int, default=d.dev_limit)
    ap.add_argument("--vocab", type=int, default=d.vocab, help="SentencePiece vocabulary of both directions")
    ap.add_argument("--variants", default=",".join(d.variants), help=f"comma-separated, in the order to run; from {','.join(VARIANTS)}")
    ap.add_argument("--aligned", help="cleaned, aligned real pairs (default: stage 2 of the main back-translation job in runs/backtranslate; "
                         "that whole job, reverse model and back-translations included, is run to make it, or reused)")
    ap.add_argument("--encoder", default=d.encoder)
    ap.add_argument("--dev", default=d.dev_data)
    ap.add_argument("--test", default=d.test_data)
    ap.add_argument("--output", default=d.output)
    ap.add_argument("--overwrite", action="store_true", help="redo the back-translation stages (needed after a code change; "
                    "finished models are reused only when settings, input and code are unchanged)")
    add_common_options(ap)
    return ap


@entry_point
def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    seeds = args.seeds.split(",")
    if not all(s.strip().lstrip("-").isdigit() for s in seeds):
        ap.error(f"--seeds {args.seeds!r}: expected whole numbers separated by commas, e.g. 0,1")
    try:
        cfg = EffectConfig(parallel_share=args.share, steps=args.steps, validate_every=args.validate_every, patience=args.patience,
                           best_metric=args.best_metric,
                           warmup=args.warmup, seeds=tuple(int(s) for s in seeds), reverse_steps=args.reverse_steps,
                           max_mono=args.max_mono, preset=args.preset, reverse_preset=args.reverse_preset, output=args.output,
                           test_limit=args.test_limit, dev_limit=args.dev_limit, vocab=args.vocab,
                           variants=tuple(args.variants.split(",")), encoder=args.encoder, dev_data=args.dev, test_data=args.test,
                           overwrite=args.overwrite)
    except ValueError as err:
        ap.error(str(err))
    aligned = args.aligned or str(run_backtranslation(BTConfig(encoder=args.encoder)).output / "02_align_filter" / "kept")
    result = run_effect(cfg, aligned)
    print(f"\n{'variant':<18}{'seeds':>6}{'synthetic':>10}{'steps':>7}{'dev BLEU':>10}{'test BLEU':>15}{'gain':>8}{'test chrF':>11}")
    for r in result["summary"]:
        print(f"{r['variant']:<18}{r['seeds']:>6}{r['synthetic_pairs']:>10,}{r['steps']:>7.0f}{r['dev_bleu']:>10.2f}"
              f"{r['test_bleu']:>9.2f} ±{r['spread']:<4.2f}{r['gain']:>+8.2f}{r['test_chrf']:>11.2f}")
    for name, s in result["synthetic"].items():
        shares = ", ".join(f"{k} {v:.1%}" for k, v in s["rejected_share"].items()) or "none"
        print(f"synthetic filter, {name}: kept {s['synthetic_pairs']:,}; removed {shares}")
    print(f"signature: {result['rows'][0]['signature']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
