"""Quality within a CPU budget: train the `small` preset for M minutes, then score the test set.

    python benchmarks/small_cpu_bleu.py --minutes 10 [--train data/raw/parallel.parquet] [--test data/test.parquet]

Prints BLEU and chrF with their sacreBLEU signatures, training tokens/s, steps and times,
and writes the checkpoint to --out. `--toy` runs on the built-in toy pairs instead (a smoke
test of the script, not a benchmark).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from mtcore.data import paths
from mtcore.runs import home
from mtcore.nmt.checkpoint import save_checkpoint
from mtcore.config import ModelConfig, TrainConfig
from mtcore.data.corpus import read_corpus
from mtcore.nmt.decoding import translate
from mtcore.nmt.metrics import corpus_bleu, corpus_chrf, spread_over
from mtcore.nmt.tokenizer import Tokenizer, train_tokenizer
from mtcore.nmt.training import fit, oriented_pairs, toy_pairs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=10.0, help="training time budget")
    p.add_argument("--train", default=str(paths.RAW_PARALLEL))
    p.add_argument("--dev", default=str(paths.DEV))
    p.add_argument("--test", default=str(paths.TEST))
    p.add_argument("--test-limit", type=int, default=500)
    p.add_argument("--direction", default="en-vi", choices=["en-vi", "vi-en"])
    p.add_argument("--spm", help="an existing SentencePiece model; default: train one on --train")
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--out", default=str(home() / "small_cpu_bleu"))
    p.add_argument("--toy", action="store_true", help="toy pairs instead of files (smoke test)")
    p.add_argument("overrides", nargs="*", help="model.KEY=VALUE / train.KEY=VALUE")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    src_lang, tgt_lang = args.direction.split("-")
    model_cfg = ModelConfig.preset("small", src_lang=src_lang, tgt_lang=tgt_lang)
    train_cfg = TrainConfig(max_tokens=4096, warmup=1000, lr_scale=2.0, validate_every=500, dev_limit=200, log_every=50,
                            patience=0, max_epochs=1000, time_budget_min=args.minutes)
    for item in args.overrides:
        section, _, rest = item.partition(".")
        if section == "model":
            model_cfg = model_cfg.with_overrides([rest])
        elif section == "train":
            train_cfg = train_cfg.with_overrides([rest])
        else:
            p.error(f"override {item!r} must start with model. or train.")

    if args.toy:
        pairs = toy_pairs(360)
        train, dev, test = pairs[:300], pairs[300:330], pairs[330:]
        if args.direction == "vi-en":
            train, dev, test = ([(t, s) for s, t in x] for x in (train, dev, test))
    else:
        for path in (args.train, args.dev, args.test):
            if not Path(path).exists():
                p.error(f"{path} not found (the data job builds it; --toy runs on toy pairs)")
        train = oriented_pairs(read_corpus(args.train), model_cfg)
        dev = oriented_pairs(read_corpus(args.dev), model_cfg)
        test = spread_over(oriented_pairs(read_corpus(args.test), model_cfg), args.test_limit)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if args.spm:
        tok = Tokenizer(args.spm)
    else:
        tok = train_tokenizer([s for pair in train for s in pair], out / "spm.train.model", vocab_size=args.vocab)
    t_tok = time.perf_counter() - t0
    print(f"data     {len(train)} train / {len(dev)} dev / {len(test)} test pairs, {args.direction}; "
          f"vocab {tok.vocab_size} ({t_tok:.0f}s)", flush=True)

    def on_validation(m, state):
        print(f"step {m['step']:>6}  dev/loss {m['dev/loss']:.3f}  dev/bleu {m['dev/bleu']:.2f}  "
              f"dev/chrf {m['dev/chrf']:.2f}", flush=True)

    def on_step(m):
        print(f"step {m['step']:>6}  train/loss {m['train/loss']:.3f}  lr {m['train/lr']:.2e}  "
              f"{m['train/tokens_per_s']:.0f} tok/s", flush=True)

    result = fit(train_cfg, model_cfg, train, dev, tok, on_step=on_step, on_validation=on_validation)
    t1 = time.perf_counter()
    hyps = translate(result.model, tok, [s for s, _ in test], beam=args.beam, batch_size=32)
    t_test = time.perf_counter() - t1
    refs = [t for _, t in test]
    bleu, chrf = corpus_bleu(hyps, refs), corpus_chrf(hyps, refs)
    save_checkpoint(out / "final", result.model, tok, train_cfg=train_cfg, step=result.steps,
                    metrics={"test/bleu": bleu.score, "test/chrf": chrf.score})
    print(f"\ntrain    {result.steps} steps in {result.elapsed_s / 60:.1f} min ({result.stop_reason}), "
          f"{result.tokens_per_s:.0f} tokens/s, {result.skipped_pairs} pairs over max_len skipped")
    print(f"test     {len(test)} pairs, beam {args.beam}, {t_test:.1f}s")
    print(f"test/bleu {bleu.score:.2f}  {bleu.signature}")
    print(f"test/chrf {chrf.score:.2f}  {chrf.signature}")
    for (s, r), h in list(zip(test, hyps))[:3]:
        print(f"\nSRC  {s}\nHYP  {h}\nREF  {r}")
    print(f"\ncheckpoint {out / 'final'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
