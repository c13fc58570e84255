"""Decoding speed: cached incremental decoding vs the naive re-run-the-prefix method, same model, one run.

    python benchmarks/decode_speed.py [--model DIR] [--test data/test.parquet] [--n 100] [--beam 5]

Anchor: the naive method of the reference code (the Annotated Transformer's
`greedy_decode` re-runs the decoder over the whole prefix at every step), measured on
the same model, sentences and settings in this run; the figure is the ratio cached/naive.
Goal: beam-5 cached >= 5x naive on CPU.

Without `--model`, a `small` model is used, randomly initialised (`--train-steps 0`) or
trained for a few steps on the test slice itself (speed only: the output quality is
irrelevant). A random model rarely emits EOS, so every sentence runs to the length limit
a*src_len + b: the worst case for the naive method's quadratic cost, stated in the output.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

import torch

from mtcore.data import paths
from mtcore.nmt.checkpoint import load_checkpoint
from mtcore.config import ModelConfig, TrainConfig
from mtcore.data.corpus import read_corpus
from mtcore.nmt.decoding import encode_sources, translate_ids
from mtcore.nmt.model import build_model, count_parameters
from mtcore.nmt.tokenizer import train_tokenizer
from mtcore.nmt.training import fit, toy_pairs


def load_pairs(path: str, n: int) -> tuple[list[tuple[str, str]], str]:
    if Path(path).exists():
        t = read_corpus(path).slice(0, n)
        return list(zip(t.column("src").to_pylist(), t.column("tgt").to_pylist())), path
    return toy_pairs(min(n, 360)), f"toy pairs ({path} not found)"


def timed(model, sources, **kw) -> tuple[float, int]:
    start = time.perf_counter()
    hyps = translate_ids(model, sources, **kw)
    return time.perf_counter() - start, sum(len(h) + 1 for h in hyps)  # generated tokens, EOS included


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", help="checkpoint directory; default: a `small` model built here")
    p.add_argument("--test", default=str(paths.TEST))
    p.add_argument("--n", type=int, default=100, help="sentences from the start of the test set")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-len-a", type=float, default=1.0)
    p.add_argument("--max-len-b", type=int, default=10)
    p.add_argument("--train-steps", type=int, default=0, help="without --model: train this many steps first")
    p.add_argument("--vocab", type=int, default=2000)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: steady on a shared machine)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--skip-naive-beam", action="store_true", help="the slowest measurement")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    pairs, source = load_pairs(args.test, args.n)

    if args.model:
        ckpt = load_checkpoint(args.model, device=args.device)
        model, tok, what = ckpt.model, ckpt.tokenizer, f"checkpoint {args.model} (step {ckpt.meta.get('step')})"
    else:
        tmp = Path(tempfile.mkdtemp())
        tok = train_tokenizer([s for pair in pairs for s in pair], tmp / "spm.model", vocab_size=args.vocab)
        cfg = ModelConfig.preset("small")
        if args.train_steps:
            tc = TrainConfig(max_tokens=2048, warmup=max(args.train_steps // 2, 1), max_steps=args.train_steps,
                             validate_every=args.train_steps, dev_limit=8, log_every=10**6, max_epochs=10**6)
            model = fit(tc, cfg, pairs, pairs[:8], tok, device=args.device).model.eval()
            what = f"`small`, trained {args.train_steps} steps on the test slice"
        else:
            torch.manual_seed(0)
            model = build_model(cfg, vocab_size=tok.vocab_size).to(args.device).eval()
            what = "`small`, randomly initialised (outputs run to the length limit)"
    sources = encode_sources(tok, [s for s, _ in pairs], max_len=model.cfg.max_positions - 1)

    print(f"device      {args.device}, torch {torch.__version__}, {torch.get_num_threads()} thread(s)")
    print(f"model       {what}; {count_parameters(model) / 1e6:.1f}M parameters, vocab {tok.vocab_size}")
    print(f"data        {len(sources)} sentences from {source}; batch {args.batch_size}; "
          f"max length {args.max_len_a}*src_len+{args.max_len_b}")
    kw = dict(max_len_a=args.max_len_a, max_len_b=args.max_len_b, batch_size=args.batch_size)
    timed(model, sources[:2], beam=1, **kw)  # warm-up
    print(f"\n{'method':<22}{'sent/s':>10}{'tok/s':>10}{'seconds':>10}")
    rows = {}
    for beam in (1, args.beam):
        for cached in (True, False):
            name = f"{'greedy' if beam == 1 else f'beam {beam}'} {'cached' if cached else 'naive'}"
            if not cached and beam > 1 and args.skip_naive_beam:
                continue
            secs, toks = timed(model, sources, beam=beam, use_cache=cached, **kw)
            rows[name] = (len(sources) / secs, toks / secs, secs)
            print(f"{name:<22}{rows[name][0]:>10.1f}{rows[name][1]:>10.0f}{secs:>10.2f}", flush=True)
    print()
    for beam in (1, args.beam):
        label = "greedy" if beam == 1 else f"beam {beam}"
        if f"{label} naive" in rows:
            ratio = rows[f"{label} cached"][0] / rows[f"{label} naive"][0]
            print(f"{label}: cached {rows[f'{label} cached'][0]:.1f} sent/s vs naive {rows[f'{label} naive'][0]:.1f} "
                  f"sent/s (anchor) = {ratio:.2f}x")
    if importlib.util.find_spec("ctranslate2") is None:
        print("\nCTranslate2: not measured. The package is not a dependency of mtcore and is not installed here "
              "(PyPI has CPU wheels); comparing needs a converter from mtcore weights to a CTranslate2 "
              "TransformerSpec, which mtcore does not have yet.")
    else:
        print("\nCTranslate2: installed, but mtcore has no converter to its TransformerSpec yet: not measured.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
