"""Transformer vs attention RNN at comparable parameter counts and the same CPU time budget.

    python benchmarks/arch_compare.py [--minutes 8] [--preset mini] [--rnn-cell lstm --rnn-layers 2 --rnn-hidden 168]

Both architectures train on the cleaned embedded corpus (the cleaning stage runs once if its output is
missing) with the same joint SentencePiece vocabulary, the same loss, optimiser family and batch size,
for the same wall-clock budget, in this one process (plain `mtcore.nmt.training.fit`, no Ray, `--threads`
torch threads). Then each decodes the first `--dev-limit` dev and `--test-limit` test sentences with
the same beam. Printed, and logged to MLflow (experiment `arch_compare`, one run per architecture):
dev/test BLEU and chrF (sacreBLEU signatures as tags), training tokens/s (source + target non-pad
tokens, mean over logging windows after the first), decoding sentences/s (test set), steps, parameters.
The table ends with the ratios rnn / transformer.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from mtcore import tracking

from mtcore.data import paths
from mtcore.config import ModelConfig, TrainConfig
from mtcore.data.corpus import read_corpus
from mtcore.nmt.decoding import translate
from mtcore.distributed.jobs import TrainingJob
from mtcore.nmt.metrics import corpus_bleu, corpus_chrf, spread_over
from mtcore.nmt.model import count_parameters
from mtcore.distributed.ray_training import resolve_train_data, tokenizer_for
from mtcore.nmt.tokenizer import Tokenizer
from mtcore.nmt.training import fit, oriented_pairs

EXPERIMENT = "arch_compare"


def configs(args) -> dict[str, tuple[ModelConfig, TrainConfig]]:
    """The two contestants: the Transformer preset, and the RNN at the same embedding size."""
    common = dict(max_tokens=args.max_tokens, warmup=args.warmup, label_smoothing=0.1, max_epochs=1000,
                  validate_every=10**9, log_every=25, patience=0, dev_limit=1, time_budget_min=args.minutes)
    transformer = ModelConfig.preset(args.preset, pre_norm=True, dropout=0.1)
    rnn = ModelConfig.preset(args.preset, arch="rnn", layers=args.rnn_layers, rnn_cell=args.rnn_cell,
                             rnn_hidden=args.rnn_hidden, rnn_attention=args.rnn_attention,
                             input_feeding=not args.no_input_feeding, dropout=0.1)
    return {
        "transformer": (transformer, TrainConfig(lr_scale=args.transformer_lr_scale, **common)),
        "rnn": (rnn, TrainConfig(lr_scale=args.rnn_lr_scale, **common)),
    }


def run_one(name, model_cfg, train_cfg, tok, train, dev, test, args) -> dict[str, float]:
    windows: list[float] = []
    print(f"[{name}] training for {args.minutes:g} min ...", flush=True)
    result = fit(train_cfg, model_cfg, train, dev, tok, on_step=lambda m: windows.append(m["train/tokens_per_s"]))
    model = result.model.eval()
    out = {"params": float(count_parameters(model)), "steps": float(result.steps),
           "train_tokens_per_s": statistics.mean(windows[1:] or windows or [result.tokens_per_s])}
    tags = {}
    for split, pairs in (("dev", spread_over(dev, args.dev_limit)), ("test", spread_over(test, args.test_limit))):
        t0 = time.perf_counter()
        hyps = translate(model, tok, [s for s, _ in pairs], beam=args.beam, batch_size=32)
        elapsed = time.perf_counter() - t0
        refs = [t for _, t in pairs]
        bleu, chrf = corpus_bleu(hyps, refs), corpus_chrf(hyps, refs)
        out[f"{split}_bleu"], out[f"{split}_chrf"] = bleu.score, chrf.score
        tags["sacrebleu.bleu_signature"], tags["sacrebleu.chrf_signature"] = bleu.signature, chrf.signature
        if split == "test":
            out["decode_sentences_per_s"] = len(pairs) / elapsed
        print(f"[{name}] {split}: {len(pairs)} sentences, beam {args.beam}, BLEU {bleu.score:.2f}, "
              f"chrF {chrf.score:.2f}, {len(pairs) / elapsed:.1f} sentences/s", flush=True)
    mlflow = tracking.setup(EXPERIMENT)
    with mlflow.start_run(run_name=f"{name}-{args.preset}-{args.minutes:g}min"):
        mlflow.log_params(tracking.flatten({"model": model_cfg.to_dict(), "train": train_cfg.to_dict()}))
        mlflow.log_params({"bench.minutes": args.minutes, "bench.beam": args.beam, "bench.threads": args.threads,
                           "bench.dev_limit": args.dev_limit, "bench.test_limit": args.test_limit})
        mlflow.log_metrics({
            "params": out["params"], "steps": out["steps"], "train/tokens_per_s": out["train_tokens_per_s"],
            "dev/bleu": out["dev_bleu"], "dev/chrf": out["dev_chrf"], "test/bleu": out["test_bleu"],
            "test/chrf": out["test_chrf"], "decode/sentences_per_s": out["decode_sentences_per_s"],
        })
        mlflow.set_tags({**tags, "mtcore.arch": model_cfg.arch, "mtcore.stop_reason": result.stop_reason})
    return out


ROWS = [("parameters", "params", "{:,.0f}"), ("steps", "steps", "{:,.0f}"),
        ("train tokens/s", "train_tokens_per_s", "{:,.0f}"), ("dev BLEU", "dev_bleu", "{:.2f}"),
        ("dev chrF", "dev_chrf", "{:.2f}"), ("test BLEU", "test_bleu", "{:.2f}"), ("test chrF", "test_chrf", "{:.2f}"),
        ("decode sentences/s", "decode_sentences_per_s", "{:.1f}")]


def table(results: dict[str, dict[str, float]]) -> str:
    t, r = results["transformer"], results["rnn"]
    lines = ["| | transformer | rnn | rnn / transformer |", "|---|---|---|---|"]
    for label, key, fmt in ROWS:
        ratio = f"{r[key] / t[key]:.2f}×" if t[key] else "–"
        lines.append(f"| {label} | {fmt.format(t[key])} | {fmt.format(r[key])} | {ratio} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=8.0, help="training budget per architecture")
    p.add_argument("--preset", default="mini", help="Transformer preset; the RNN takes its d_model (embedding size)")
    p.add_argument("--rnn-cell", default="lstm", choices=["lstm", "gru"])
    p.add_argument("--rnn-layers", type=int, default=2)
    p.add_argument("--rnn-hidden", type=int, default=168, help="168: the mini Transformer's parameters within 2%% (8k pieces)")
    p.add_argument("--rnn-attention", default="general", choices=["bahdanau", "dot", "general"])
    p.add_argument("--no-input-feeding", action="store_true")
    p.add_argument("--transformer-lr-scale", type=float, default=1.0,
                   help="1.0: at d_model 128 and warmup 300, 2.0 peaks too high (benchmarks/RESULTS.md)")
    p.add_argument("--rnn-lr-scale", type=float, default=0.5, help="as experiments/configs/rnn_small.yaml")
    p.add_argument("--max-tokens", type=int, default=1500)
    p.add_argument("--warmup", type=int, default=300)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--dev-limit", type=int, default=300)
    p.add_argument("--test-limit", type=int, default=500)
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: stable on a shared machine)")
    p.add_argument("--archs", default="transformer,rnn", help=argparse.SUPPRESS)  # smoke checks: one arch
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)

    job = TrainingJob().with_overrides([f"job.vocab_size={args.vocab}"])
    train_data = resolve_train_data(job)
    tok = Tokenizer(tokenizer_for(train_data, job))
    model_cfg = ModelConfig()  # direction en-vi
    train = oriented_pairs(read_corpus(train_data), model_cfg)
    dev = oriented_pairs(read_corpus(paths.DEV), model_cfg)
    test = oriented_pairs(read_corpus(paths.TEST), model_cfg)
    print(f"data: {len(train):,} train pairs ({train_data}), {len(dev):,} dev, {len(test):,} test; vocab {tok.vocab_size}",
          flush=True)
    results = {}
    for name, (model_cfg, train_cfg) in configs(args).items():
        if name in args.archs.split(","):
            results[name] = run_one(name, model_cfg, train_cfg, tok, train, dev, test, args)
    if len(results) < 2:
        print(results)
        return 0
    rnn = configs(args)["rnn"][0]
    print(f"\nen→vi, {args.minutes:g} min of training each, {args.threads} torch thread(s), beam {args.beam}; "
          f"transformer: {args.preset} (pre-norm); rnn: {rnn.rnn_cell} {rnn.layers}×{rnn.rnn_hidden}, "
          f"{rnn.rnn_attention} attention, input feeding {rnn.input_feeding}, d_model {rnn.d_model}")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
