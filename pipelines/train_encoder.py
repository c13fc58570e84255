"""Train a bilingual sentence encoder (dual encoder, additive-margin in-batch softmax) with Ray Train.

    python pipelines/train_encoder.py                                   # the embedded corpus → runs/encoders/custom
    python pipelines/train_encoder.py --corpus runs/clean/kept --output runs/encoders/mine --epochs 8
    python pipelines/train_encoder.py --corpus runs/clean/kept --output runs/encoders/mine --classifier-only
    python pipelines/train_encoder.py --corpus europarl --langs de-en --output runs/encoders/de-en   # europarl.de + .en

The result is a directory (config.json, model.pt, spm.model, metrics.json) usable as
`--encoder DIR` by align_filter.py / align_docs.py; the run is logged to MLflow
(experiment `train_encoder`) with held-out retrieval P@1 in both directions.
`--classifier` also trains the pair classifier of `align_filter.py --score classifier` (on the
same corpus, with the encoder's pieces) into DIR-classifier/; `--classifier-only` trains just
that, for an encoder that is already in OUTPUT.
"""

from __future__ import annotations

import argparse
import sys

from mtcore.console import add_common_options
from mtcore.errors import entry_point
from mtcore.alignment.classifier import ClassifierConfig, describe_heldout, read_classifier_metrics, train_beside_encoder
from mtcore.embedding.train import EncoderTrainConfig, train_encoder
from mtcore.data.paths import RAW_PARALLEL
from mtcore.runs import home, languages_of


def build_parser() -> argparse.ArgumentParser:
    """The command line (the tests parse every documented command with it)."""
    d = EncoderTrainConfig()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=str(RAW_PARALLEL), help="parallel corpus, any format the readers take (default: %(default)s)")
    ap.add_argument("--output", default=str(home() / "encoders" / "custom"), help="encoder directory (default: %(default)s)")
    ap.add_argument("--langs", metavar="SRC-TGT", default=None, help="the corpus's languages, e.g. de-en: its "
                    "cleaning rules, a Moses pair's suffixes, and the pair align_filter.py --langs checks (default: those "
                    f"the corpus's cleaning stage recorded, else {'-'.join(d.langs)})")
    ap.add_argument("--epochs", type=int, default=d.epochs)
    ap.add_argument("--batch-size", type=int, default=d.batch_size)
    ap.add_argument("--layers", type=int, default=d.model.layers, help="Transformer layers (0: pooled embeddings + MLP)")
    ap.add_argument("--vocab-size", type=int, default=d.model.vocab_size)
    ap.add_argument("--num-workers", type=int, default=d.num_workers, help="Ray Train workers")
    ap.add_argument("--no-mlflow", action="store_true", help="do not log to MLflow")
    ap.add_argument("--classifier", action="store_true", help="also train the pair classifier (align_filter --score classifier)")
    ap.add_argument("--classifier-only", action="store_true", help="train only the pair classifier, for the encoder in OUTPUT")
    ap.add_argument("--classifier-epochs", type=int, default=ClassifierConfig().epochs)
    add_common_options(ap)
    return ap


@entry_point
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.classifier or args.classifier_only:
        ClassifierConfig(epochs=args.classifier_epochs).check()  # before an encoder trains for minutes
    if args.classifier_only:
        return _train_classifier(args)
    cfg = EncoderTrainConfig(epochs=args.epochs, batch_size=args.batch_size, num_workers=args.num_workers,
                             langs=languages_of(args.corpus, args.langs))
    cfg.model.layers, cfg.model.vocab_size = args.layers, args.vocab_size
    result = train_encoder(args.corpus, args.output, cfg, track=not args.no_mlflow)
    m, (s, t) = result.metrics, cfg.langs
    print(f"encoder → {result.path}")
    print(f"retrieval P@1 on {m['heldout_pairs']} held-out pairs: {s}→{t} {m[f'p_at_1_{s}_{t}']:.3f}  "
          f"{t}→{s} {m[f'p_at_1_{t}_{s}']:.3f}")
    print(f"trained on {m['train_pairs']:,} pairs in {m['train_seconds']:.0f} s" + (f"; MLflow run {result.run_id}" if result.run_id else ""))
    return _train_classifier(args) if args.classifier else 0


def _train_classifier(args) -> int:
    from mtcore.embedding.encoder import EncoderError, is_encoder_dir

    if not is_encoder_dir(args.output):
        raise EncoderError(f"--classifier-only: {args.output} holds no encoder; train one first (without --classifier-only)")
    path = train_beside_encoder(args.corpus, args.output, ClassifierConfig(epochs=args.classifier_epochs),
                                track=not args.no_mlflow, langs=languages_of(args.corpus, args.langs))
    m = read_classifier_metrics(path)
    if held := describe_heldout(m):
        print(f"pair classifier: {held}")
    print(f"pair classifier → {path} ({m.get('train_pairs', 0):,} pairs, {m.get('train_seconds', 0):.0f} s); "
          f"use it with `python pipelines/align_filter.py --encoder {args.output} --score classifier`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
