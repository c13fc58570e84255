"""Back-translation's effect in a simulated low-resource setting on the embedded data.

    python experiments/bt_effect.py [--share 0.2] [--minutes 5 | --steps N] [--reverse-minutes 5] [--max-mono 6000]

Keeps `--share` of the cleaned, aligned pairs as parallel data and uses the Vietnamese side
of the rest as monolingual text; trains en→vi with the same budget on real only, real + beam
BT, real + noised BT and real + tagged beam BT; prints test BLEU/chrF (MLflow experiment `bt_effect`).
"""

from __future__ import annotations

import argparse
import sys

from mtcore.console import add_common_options
from mtcore.errors import entry_point
from mtcore.backtranslation.experiment import EffectConfig, run_effect
from mtcore.backtranslation.pipeline import run_backtranslation
from mtcore.backtranslation import BTConfig


def build_parser() -> argparse.ArgumentParser:
    """The command line (the tests parse every documented command with it)."""
    d = EffectConfig()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--share", type=float, default=d.parallel_share, help="share of real pairs kept parallel (default: %(default)s)")
    ap.add_argument("--minutes", type=float, default=d.minutes, help="training budget per en→vi model (default: %(default)s)")
    ap.add_argument("--steps", type=int, default=d.steps, help="a step budget per en→vi model instead of --minutes")
    ap.add_argument("--warmup", type=int, default=d.warmup, help="warm-up steps of every en→vi model (default: %(default)s)")
    ap.add_argument("--reverse-minutes", type=float, default=d.reverse_minutes)
    ap.add_argument("--max-mono", type=int, default=d.max_mono)
    ap.add_argument("--preset", default=d.preset)
    ap.add_argument("--test-limit", type=int, default=d.test_limit)
    ap.add_argument("--reverse-preset", default=d.reverse_preset)
    ap.add_argument("--vocab", type=int, default=d.vocab, help="SentencePiece vocabulary of both directions")
    ap.add_argument("--variants", default=",".join(d.variants), help="comma-separated subset of %(default)s")
    ap.add_argument("--aligned", help="cleaned, aligned real pairs (default: those of the main back-translation job, made if missing)")
    ap.add_argument("--encoder", default=d.encoder)
    ap.add_argument("--dev", default=d.dev_data)
    ap.add_argument("--test", default=d.test_data)
    ap.add_argument("--output", default=d.output)
    add_common_options(ap)
    return ap


@entry_point
def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    try:
        cfg = EffectConfig(parallel_share=args.share, minutes=args.minutes, steps=args.steps, warmup=args.warmup, reverse_minutes=args.reverse_minutes,
                           max_mono=args.max_mono, preset=args.preset, output=args.output, test_limit=args.test_limit,
                           reverse_preset=args.reverse_preset, vocab=args.vocab, variants=tuple(args.variants.split(",")),
                           encoder=args.encoder, dev_data=args.dev, test_data=args.test)
    except ValueError as err:
        ap.error(str(err))
    aligned = args.aligned or str(run_backtranslation(BTConfig()).output / "02_align_filter" / "kept")
    rows = run_effect(cfg, aligned)
    print(f"\n{'variant':<16}{'synthetic':>10}{'steps':>7}{'dev BLEU':>10}{'test BLEU':>11}{'test chrF':>11}")
    for r in rows:
        print(f"{r['variant']:<16}{r['synthetic_pairs']:>10,}{r['steps']:>7}{r['dev_bleu']:>10.2f}{r['test_bleu']:>11.2f}{r['test_chrf']:>11.2f}")
    print(f"signature: {rows[0]['signature']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
