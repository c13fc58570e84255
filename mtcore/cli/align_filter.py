"""Drop misaligned pairs by bilingual sentence-embedding similarity, on Ray Data.

    python pipelines/align_filter.py                        # runs/clean/kept (else the raw corpus) → runs/align
    python pipelines/align_filter.py --input runs/clean/kept --output runs/align-m --score margin --threshold auto
    python pipelines/align_filter.py --encoder sentence-transformers/LaBSE ...   # if available offline
    python pipelines/align_filter.py --score dual_xent --nmt runs/ray_train/EN-VI/best runs/ray_train/VI-EN/best
    python pipelines/align_filter.py --score classifier

`--score classifier` scores each pair with a small classifier that reads both sentences at once
(decomposable attention over the encoder's pieces), trained on near misses made from the corpus:
an outdated translation, the neighbouring segment, a partial one, a changed number or name
(Bicleaner-AI's recipe at CPU scale). The built-in one is trained on first use (about 8 minutes on
2 CPU cores with native bf16, 13 without). On the near-miss dev set it catches 43 % of the misaligned pairs where the margin catches
17 %, at 2.2 % vs 1.1 % false rejects; on random misalignments it is less precise (benchmarks/RESULTS.md),
so margin stays the default.
`--score dual_xent` scores each pair with two of your translation models, one per direction
(dual conditional cross-entropy, Junczys-Dowmunt 2018): slower than the encoder, and it sees the
one changed word that a sentence embedding averages away.

Writes DIR/kept/, DIR/rejects/ (reason low_cosine / low_margin / low_dual_xent / low_classifier, with scores; empty_side for a pair with an empty side),
DIR/scores.parquet, DIR/report.json and DIR/histogram.png (also logged to MLflow).
`--threshold auto` compares the corpus's scores with those of pairs known to be good
(`--calibration reference`, the default): it rejects what scores below the lowest `--max-false-reject`
(2 %) of the known-good ones of the same source length (1 word, 2-3, 4+: `--reference-rule budget`;
`budget_pooled`: one threshold for every length, which spent the budget on one-word labels;
`fewest_errors` rejects only the band where most pairs cannot be good), unless the random-pair
rule's threshold, its floor, is higher (a weak encoder: a warning and the report say so). The built-in encoder holds out whole catalogs for this; or pass
`--reference FILE` with pairs you trust, from your domain. Without reference pairs it calibrates
against near misses made from the corpus (`near_miss`); `random` is the first rule (random
same-catalog pairs; lets most near misses through). The report gives the threshold, how it was
chosen and the estimated noise share.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mtcore.data.text_export import FORMATS, export_text
from mtcore.console import add_common_options
from mtcore.errors import entry_point
from mtcore.alignment.filter import CALIBRATIONS, REFERENCE_RULES, FilterConfig, filter_corpus
from mtcore.data.corpus import corpus_argument
from mtcore.data.ledger import StageReport
from mtcore.data.paths import RAW_PARALLEL
from mtcore.runs import home, languages_of
from mtcore.alignment.scoring import SCORES


def _default_input() -> str:
    cleaned = home() / "clean" / "kept"
    return str(cleaned if cleaned.is_dir() else RAW_PARALLEL)


def build_parser() -> argparse.ArgumentParser:
    """The command line (the tests parse every documented command with it)."""
    d = FilterConfig()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", default=_default_input(), help="corpus: a stage's kept/ dir, Parquet, TSV, .po/.mo, PREFIX, or - for TSV on stdin (default: %(default)s)")
    ap.add_argument("--output", default=str(home() / "align"), help="output directory (default: %(default)s)")
    ap.add_argument("--encoder", default=d.encoder, help="'builtin', an encoder DIR, or a sentence-transformers name/path (default: %(default)s)")
    ap.add_argument("--score", default=d.score, choices=SCORES)
    ap.add_argument("--threshold", default=d.threshold, help="'auto' or a number (default: %(default)s)")
    ap.add_argument("--calibration", default=d.calibration, choices=CALIBRATIONS,
                    help="for --threshold auto: reference (known-good pairs, by --reference-rule), near_miss (near misses made "
                         "from the corpus) or random (the first rule) (default: %(default)s)")
    ap.add_argument("--max-false-reject", type=float, default=d.max_false_reject, help="target share of good pairs rejected (default: %(default)s)")
    ap.add_argument("--reference-rule", default=d.reference_rule, choices=REFERENCE_RULES,
                    help="for --calibration reference: budget (reject below the --max-false-reject quantile of the known-good pairs "
                         "of the same source length: the most noise caught for that loss), budget_pooled (one quantile for every "
                         "length) or fewest_errors (keeps what overlaps good pairs) (default: %(default)s)")
    ap.add_argument("--reference", default=d.reference, metavar="FILE",
                    help="known-good pairs for --calibration reference, any corpus format (default: the encoder's held-out catalogs)")
    ap.add_argument("--k", type=int, default=d.k, help="neighbours for the margin score (default: %(default)s)")
    ap.add_argument("--nmt", nargs=2, metavar=("FORWARD", "REVERSE"), default=("", ""),
                    help="for --score dual_xent: checkpoint directories of a source→target and a target→source model")
    ap.add_argument("--langs", metavar="SRC-TGT", default=None, help="the corpus's languages, e.g. de-en: the suffixes of "
                    "a Moses pair PREFIX.de/PREFIX.en, the text exports' names, and the pair the encoder must have been "
                    "trained on (train_encoder.py --langs) (default: those the input's cleaning stage recorded, else en-vi)")
    ap.add_argument("--overwrite", action="store_true", help="make the output again even if it exists")
    ap.add_argument("--no-ray", action="store_true", help="encode in this process instead of a Ray Data actor pool")
    ap.add_argument("--no-mlflow", action="store_true")
    ap.add_argument("--format", choices=FORMATS, default="parquet", help="also write the kept pairs as OUTPUT/kept.tsv "
                    "(tsv) or OUTPUT/kept.SRC + OUTPUT/kept.TGT (txt) (default: Parquet only)")
    add_common_options(ap)
    return ap


@entry_point
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.input = corpus_argument(args.input, home() / "stdin")
    cfg = FilterConfig(encoder=args.encoder, score=args.score, threshold=args.threshold, k=args.k,
                       calibration=args.calibration, max_false_reject=args.max_false_reject, reference=args.reference,
                       reference_rule=args.reference_rule,
                       nmt_forward=args.nmt[0], nmt_reverse=args.nmt[1], langs=languages_of(args.input, args.langs))
    result = filter_corpus(args.input, args.output, cfg, overwrite=args.overwrite, use_ray=not args.no_ray, track=not args.no_mlflow)
    r = result.report
    if result.skipped:
        print(f"reusing {result.output}: made with the same settings, encoder, code and input contents (--overwrite re-runs it)")
    print(StageReport(r["stage"], r["input"], r["kept"], r["rejected"]).summary_table())
    cal = r.get("calibration", {})
    print(f"score: {r['score']}  threshold: {r['threshold']:.4f} ({cal.get('method', '')})")
    below = {"near misses": cal.get("near_miss_below_threshold"), "random pairs": cal.get("misaligned_below_threshold")}
    print(f"estimated noise share: {cal.get('estimated_misaligned_share')}  estimated false rejects: {cal.get('estimated_false_reject')}  "
          "below threshold: " + ", ".join(f"{k} {v}" for k, v in below.items() if v is not None))
    if r.get("timing"):
        print(f"speed: {r['timing'].get('pairs_per_second')} pairs/s (encode {r['timing']['encode_seconds']} s)")
    out = Path(result.output)
    print(f"kept → {out / 'kept'}   rejects → {out / 'rejects'}   report → {out / 'report.json'}   histogram → {out / 'histogram.png'}")
    for path in export_text(out / "kept", args.format, out / "kept", cfg.langs):
        print(f"kept as text → {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
