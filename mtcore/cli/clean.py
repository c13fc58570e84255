"""Clean a parallel corpus on Ray Data: DIR/kept/, DIR/rejects/ (reason-coded) and DIR/report.json.

The report, a bar chart of rejects by reason and the rules' score histograms are also
logged as an MLflow run in the experiment `clean` (unless --no-mlflow).

    python pipelines/clean.py                                   # the embedded raw corpus → runs/clean
    python pipelines/clean.py --input corpus.parquet --output runs/clean-x --config rules.yaml --overwrite
    python pipelines/clean.py --input europarl --langs de-en --output runs/clean-de-en   # europarl.de + europarl.en
    python pipelines/clean.py --input own.tsv --output runs/own --format txt             # + runs/own/kept.en, kept.vi
    paste own.en own.vi | python pipelines/clean.py --input - --output runs/own-stdin    # TSV on stdin

The rules and their defaults are in mtcore/cleaning/default_rules.yaml.
"""

from __future__ import annotations

import argparse
import sys

from mtcore import checks
from mtcore.console import add_common_options
from mtcore.errors import entry_point
from mtcore.cleaning import clean_dataset, load_config
from mtcore.data.corpus import corpus_argument
from mtcore.data.ledger import StageReport
from mtcore.data.paths import RAW_PARALLEL
from mtcore.runs import home
from mtcore.data.text_export import FORMATS, export_text


def build_parser() -> argparse.ArgumentParser:
    """The command line (the tests parse every documented command with it)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", default=str(RAW_PARALLEL), help="corpus: Parquet file/dir, TSV, .po/.mo, PREFIX of PREFIX.en/.vi, or - for TSV on stdin (default: %(default)s)")
    ap.add_argument("--output", default=str(home() / "clean"), help="output directory (default: %(default)s)")
    ap.add_argument("--config", default=None, help="rules YAML (default: mtcore/cleaning/default_rules.yaml)")
    ap.add_argument("--langs", metavar="SRC-TGT", help="the corpus's languages, e.g. de-en (default: en-vi, or the "
                    "rules file's LanguageID languages); also the suffixes of a Moses pair PREFIX.de/PREFIX.en")
    ap.add_argument("--overwrite", action="store_true", help="make the output again even if it exists")
    ap.add_argument("--num-cpus", type=int, default=None, help="local Ray CPUs (default: all; ignored with RAY_ADDRESS)")
    ap.add_argument("--no-mlflow", action="store_true", help="do not log the report and its plots to MLflow (experiment `clean`)")
    ap.add_argument("--format", choices=FORMATS, default="parquet", help="also write the kept pairs as OUTPUT/kept.tsv "
                    "(tsv) or OUTPUT/kept.SRC + OUTPUT/kept.TGT (txt) for other toolkits (default: Parquet only)")
    add_common_options(ap)
    return ap


@entry_point
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cfg = load_config(args.config)  # every config error surfaces before any work
    args.input = corpus_argument(args.input, home() / "stdin")
    if args.langs:
        cfg = cfg.with_languages(*checks.language_pair(args.langs))
    result = clean_dataset(args.input, args.output, cfg, overwrite=args.overwrite, num_cpus=args.num_cpus,
                           track=not args.no_mlflow)
    r = result.report
    if result.skipped:
        print(f"reusing {result.output}: made with the same rules, code and input contents (--overwrite re-runs it)")
    print(StageReport(r["stage"], r["input"], r["kept"], r["rejected"]).summary_table())
    print("normalised rows: " + ", ".join(f"{k} {v:,}" for k, v in r.get("normalized_rows", {}).items()))
    print(f"kept → {result.output / 'kept'}   rejects → {result.output / 'rejects'}   report → {result.output / 'report.json'}")
    for path in export_text(result.output / "kept", args.format, result.output / "kept", cfg.languages):
        print(f"kept as text → {path}")
    if r.get("mlflow_run_id"):
        print(f"MLflow run {r['mlflow_run_id']} (experiment clean): report.json, plots/rejects_by_reason.png, plots/score_histograms.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
