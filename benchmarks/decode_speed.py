"""Decoding speed and BLEU of a trained model: mtcore's decoder vs its CTranslate2 and HF exports.

    python benchmarks/decode_speed.py [--model DIR] [--n 300] [--beam 5] [--threads 1]

One checkpoint, exported in this run (`mtcore.nmt.export`) to CTranslate2 float32 and int8
and to a Hugging Face `MarianMTModel`; the same sentences (the first `--n` of the test set),
the same beam, length-sorted batches of `--batch-size`, output limit a * src_len + b, and
the same number of CPU threads for every runtime. Compared:

    mtcore beam N, KV cache      mtcore.nmt.decoding.translate (the decoder mtcore ships)
    mtcore beam N, naive         re-runs the decoder over the prefix each step (--naive; issue 5's anchor)
    CTranslate2 float32 / int8   ctranslate2.Translator over the export
    HF generate                  MarianMTModel.generate over the export

Anchor: CTranslate2 float32 on the same model, sentences and threads in this run. Goal
(issue 19): mtcore's cached beam search within 2x of it. BLEU is sacreBLEU against the
test references; beam outputs differ a little because mtcore's length penalty is GNMT's
and the others' is |Y|^alpha (see mtcore.nmt.export). Timings are the best of `--rounds`
interleaved rounds, so that a burst of load on a shared machine hits every runtime alike.

Without `--model`, the `mini` preset (the CPU preset for budgets of a few minutes) is trained
first for `--train-minutes` on the embedded corpus (data/raw/parallel.parquet, en->vi, a
SentencePiece model of `--vocab` pieces trained on a sample of it) and saved to `--out`, so that a
second run can take it with `--model`. A decoding benchmark needs a trained model: a random
one rarely emits EOS, and then every sentence runs to the length limit. `--toy` trains on 240
of the built-in toy pairs and decodes the other 120 (with `--model`: a model trained on them),
for a machine too busy to train on the real corpus in minutes (RESULTS.md says when it was used).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

from mtcore.config import ModelConfig, TrainConfig
from mtcore.data import paths
from mtcore.runs import home
from mtcore.data.corpus import read_corpus
from mtcore.nmt.checkpoint import load_checkpoint, save_checkpoint
from mtcore.nmt.decoding import DEFAULT_LEN_PENALTY, DEFAULT_MAX_LEN_A, DEFAULT_MAX_LEN_B, translate
from mtcore.nmt.export import to_ctranslate2, to_hf
from mtcore.nmt.exported import translate_ctranslate2, translate_hf
from mtcore.nmt.metrics import corpus_bleu
from mtcore.nmt.model import count_parameters
from mtcore.nmt.tokenizer import train_tokenizer
from mtcore.nmt.training import fit, oriented_pairs, toy_pairs

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the HF model is the local export: never reach for the Hub
TOY = toy_pairs(360)


def train_model(args) -> Path:
    """`--preset` on the embedded corpus (or the toy pairs) for `--train-minutes`; saved under `--out`."""
    cfg = ModelConfig.preset(args.preset)
    out = Path(args.out)
    if args.toy:  # the settings tests/test_export.py trains with: a few hundred small steps suffice
        train, dev = TOY[:240], TOY[240:260]
        tc = TrainConfig(max_tokens=256, warmup=100, lr_scale=0.5, label_smoothing=0.0, max_len=64, max_steps=400,
                         validate_every=10**9, patience=0, log_every=10**9, max_epochs=1000, dev_limit=20,
                         time_budget_min=args.train_minutes)
        vocab = min(args.vocab, 500)
    else:
        train = oriented_pairs(read_corpus(args.train), cfg)
        dev = oriented_pairs(read_corpus(paths.DEV), cfg)[:200]
        tc = TrainConfig(max_tokens=4096, warmup=300, lr_scale=1.0, validate_every=10**9, patience=0, log_every=10**9,
                         max_epochs=1000, dev_limit=200, time_budget_min=args.train_minutes)
        vocab = args.vocab
    tok = train_tokenizer([s for pair in (TOY if args.toy else train) for s in pair], out / "spm.train.model",
                          vocab_size=vocab, max_sentences=args.spm_sentences)
    print(f"training  `{args.preset}` for {args.train_minutes} min on {len(train)} pairs "
          f"({'toy pairs' if args.toy else args.train})", flush=True)
    result = fit(tc, cfg, train, dev, tok)
    print(f"trained   {result.steps} steps in {result.elapsed_s / 60:.1f} min", flush=True)
    return save_checkpoint(out / "model", result.model, tok, train_cfg=tc, step=result.steps)


def timed(fn, texts) -> tuple[float, list[str]]:
    start = time.perf_counter()
    hyps = fn(texts)
    return time.perf_counter() - start, hyps


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", help="checkpoint directory; default: train one first (see above)")
    p.add_argument("--test", default=str(paths.TEST))
    p.add_argument("--n", type=int, default=300, help="sentences from the start of the test set")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=1, help="CPU threads of every runtime (1: steady on a shared machine)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds; the best is reported")
    p.add_argument("--naive", action="store_true", help="also time mtcore without the KV cache (slow)")
    p.add_argument("--train", default=str(paths.RAW_PARALLEL), help="without --model: training corpus")
    p.add_argument("--toy", action="store_true", help="train and test on the toy pairs (240 / 120)")
    p.add_argument("--preset", default="mini", help="without --model: model preset")
    p.add_argument("--train-minutes", type=float, default=8.0, help="without --model: training budget")
    p.add_argument("--vocab", type=int, default=8000, help="without --model: SentencePiece pieces")
    p.add_argument("--spm-sentences", type=int, default=100_000, help="without --model: SentencePiece trains on a sample")
    p.add_argument("--out", default=str(home() / "decode_speed"), help="without --model: where the model goes")
    args = p.parse_args(argv)
    import ctranslate2
    import transformers

    torch.set_num_threads(args.threads)
    model_dir = Path(args.model) if args.model else train_model(args)
    ckpt = load_checkpoint(model_dir)
    test = TOY[240:][: args.n] if args.toy else oriented_pairs(read_corpus(args.test), ckpt.model_cfg)[: args.n]
    texts, refs = [s for s, _ in test], [t for _, t in test]

    work = Path(tempfile.mkdtemp(prefix="decode_speed."))
    ct2 = {q: ctranslate2.Translator(str(to_ctranslate2(model_dir, work / f"ct2_{q}", quantization=q)), device="cpu",
                                     inter_threads=1, intra_threads=args.threads) for q in ("float32", "int8")}
    # HF's Marian is post-norm only; a pre-norm model (the CPU presets' default) has no HF export to time.
    hf = None if ckpt.model_cfg.pre_norm else transformers.MarianMTModel.from_pretrained(str(to_hf(model_dir, work / "hf"))).eval()

    kw = dict(beam=args.beam, len_penalty=DEFAULT_LEN_PENALTY, max_len_a=DEFAULT_MAX_LEN_A, max_len_b=DEFAULT_MAX_LEN_B,
              batch_size=args.batch_size)
    tok = ckpt.tokenizer
    ct2_kw = kw | {"max_positions": ckpt.model_cfg.max_positions}
    methods = {
        f"mtcore beam {args.beam}, KV cache": lambda t: translate(ckpt.model, tok, t, **kw),
        f"CTranslate2 float32 beam {args.beam}": lambda t: translate_ctranslate2(ct2["float32"], tok, t, **ct2_kw),
        f"CTranslate2 int8 beam {args.beam}": lambda t: translate_ctranslate2(ct2["int8"], tok, t, **ct2_kw),
    }
    if hf is not None:
        methods[f"HF generate beam {args.beam}"] = lambda t: translate_hf(hf, tok, t, **kw)
    if args.naive:
        methods[f"mtcore beam {args.beam}, naive"] = lambda t: translate(ckpt.model, tok, t, use_cache=False, **kw)
    anchor = f"CTranslate2 float32 beam {args.beam}"

    print(f"device    cpu, {args.threads} thread(s) per runtime; torch {torch.__version__}, ctranslate2 "
          f"{ctranslate2.__version__}, transformers {transformers.__version__}")
    print(f"model     {model_dir} (step {ckpt.meta.get('step')}): {ckpt.model_cfg.arch} d{ckpt.model_cfg.d_model} "
          f"x{ckpt.model_cfg.layers}, {count_parameters(ckpt.model) / 1e6:.1f}M parameters, vocab {tok.vocab_size}, "
          f"{ckpt.model_cfg.direction}{', pre-norm: no HF export (Marian is post-norm only)' if hf is None else ''}")
    where = "the toy pairs 240-359" if args.toy else args.test
    print(f"data      {len(texts)} sentences from {where}; beam {args.beam}, batch {args.batch_size}, length "
          f"penalty {DEFAULT_LEN_PENALTY}, max length {DEFAULT_MAX_LEN_A}*src_len+{DEFAULT_MAX_LEN_B}", flush=True)
    for fn in methods.values():
        fn(texts[:4])  # warm-up: first-call allocations, lazy initialisation
    best: dict[str, float] = {}
    hyps: dict[str, list[str]] = {}
    for r in range(args.rounds):
        for name, fn in methods.items():
            secs, hyps[name] = timed(fn, texts)
            best[name] = min(secs, best.get(name, float("inf")))
        print(f"round {r + 1}/{args.rounds} done", flush=True)

    print(f"\n| method | sentences/s | BLEU | time vs {anchor} |\n|---|---|---|---|")
    for name in methods:
        bleu = corpus_bleu(hyps[name], refs)
        print(f"| {name} | {len(texts) / best[name]:.1f} | {bleu.score:.2f} | {best[name] / best[anchor]:.2f}× |")
    print(f"\nBLEU signature {corpus_bleu(hyps[anchor], refs).signature}")
    ratio = best[f"mtcore beam {args.beam}, KV cache"] / best[anchor]
    print(f"mtcore beam {args.beam} (KV cache) takes {ratio:.2f}× the time of CTranslate2 float32: goal <= 2× "
          f"{'met' if ratio <= 2 else 'NOT met'}")
    same = sum(a == b for a, b in zip(hyps[f"mtcore beam {args.beam}, KV cache"], hyps[anchor]))
    print(f"identical outputs mtcore vs CTranslate2 float32: {same}/{len(texts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
