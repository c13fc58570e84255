"""One GPU, mtcore's own training loop: tokens/s, MFU and test BLEU of the default GPU job's model.

    python benchmarks/gpu_train_bleu.py [--minutes 3] [--probe-steps 150] [--compile-bleu]

The loop is `mtcore.nmt.training.fit`, the plain-PyTorch loop every Ray Train worker runs (Ray itself is
not needed here), with what `preset: auto` gives a GPU job: the `base` model and `AUTO_GPU_TRAIN`
(8,192-token batches, 2 of them per update, warm-up 4,000, bf16 autocast). Data: the embedded corpus as
it ships (data/raw/parallel.parquet, uncleaned: the cleaning stage needs Ray), a SentencePiece model of
`--vocab` pieces trained on it, data/dev.parquet for validation and data/test.parquet for the test.

1. probe: `--probe-steps` updates of `fit`, eager and with `train.compile`, from the same start. The real
   loop's tokens/s (non-padding source + target tokens; batches of every shape, padding, host-side
   batching), and its MFU: 6 x weight-matrix parameters FLOPs per non-padding token (train_speed.py's
   accounting without the attention terms, so a lower bound), over the GPU's dense bf16 peak.
   Anchor: mtcore's own step on a fixed-shape batch of the same tokens without padding (train_speed.py);
   the ratio is what batching real sentences costs.
2. BLEU: `fit` for `--minutes` (eager; `--compile-bleu`: compiled), then beam 5 over the test set,
   scored by sacreBLEU with its signature; decoding speed in sentences/s.

Needs a CUDA GPU (`--device cpu --tiny` runs the same steps with toy sizes: a smoke test, not a figure).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import torch

from mtcore.config import AUTO_GPU_TRAIN, ModelConfig, TrainConfig
from mtcore.data import paths
from mtcore.nmt.decoding import translate
from mtcore.nmt.encoded import EncodedPairs, write_encoded
from mtcore.nmt.metrics import corpus_bleu, corpus_chrf
from mtcore.nmt.tokenizer import Tokenizer, train_tokenizer
from mtcore.nmt.training import fit, oriented_pairs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_speed import default_peak, measure, weight_matrix_params  # noqa: E402  (a sibling benchmark)


def weight_flops_per_token(cfg: ModelConfig, src_share: float) -> float:
    """Training FLOPs per non-padding token: 6 x the weight-matrix parameters a source / target token meets."""
    p_src, p_tgt = weight_matrix_params(cfg)
    return 6 * (src_share * p_src + (1 - src_share) * p_tgt)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=3.0, help="training budget of the BLEU run (0: no BLEU run)")
    p.add_argument("--probe-steps", type=int, default=150, help="updates of each probe (0: no probe)")
    p.add_argument("--compile-bleu", action="store_true", help="train the BLEU run with train.compile")
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--spm", help="a SentencePiece model trained on the corpus already (default: train one, --vocab)")
    p.add_argument("--test-limit", type=int, default=0, help="first N test pairs (0: all)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true", help="toy sizes (a smoke test of the script on any device)")
    p.add_argument("--out", default="", help="folder for the tokenizer and encoded corpus (default: a temporary one)")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error("no CUDA GPU here (--device cpu --tiny runs the smoke test)")
    out = Path(args.out or tempfile.mkdtemp(prefix="gpu_train_bleu_"))
    out.mkdir(parents=True, exist_ok=True)
    peak = default_peak(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"device   {name}; torch {torch.__version__}; peak {peak or '-'} TFLOP/s bf16", flush=True)

    model_cfg = ModelConfig.preset("tiny" if args.tiny else "base", src_lang="en", tgt_lang="vi")
    train_keys = dict(AUTO_GPU_TRAIN) | (dict(max_tokens=512, accumulation=1, warmup=20, validate_every=10,
                                               dev_limit=20, beam=1) if args.tiny else {})
    t0 = time.perf_counter()
    # the embedded files are en (src) -> vi (tgt) as they ship: read with pyarrow alone, since read_corpus's
    # language check needs py3langid, which a GPU image may lack
    train, dev, test = (oriented_pairs(pq.read_table(path, columns=["src", "tgt"]), model_cfg)
                        for path in (paths.RAW_PARALLEL, paths.DEV, paths.TEST))
    if args.tiny:
        train, dev, test = train[:3000], dev[:40], test[:40]
    elif args.test_limit:
        test = test[: args.test_limit]
    tok = Tokenizer(args.spm) if args.spm else train_tokenizer(
        [s for pair in train for s in pair], out / "spm.model", vocab_size=1000 if args.tiny else args.vocab)
    encoded = EncodedPairs(write_encoded(train, tok, Path(tempfile.mkdtemp(dir=out)) / "encoded"))  # this tokenizer's
    src_lens, tgt_lens = encoded.lengths()
    src_share = float(src_lens.sum() + len(encoded)) / float(src_lens.sum() + tgt_lens.sum() + 2 * len(encoded))
    model_cfg = dataclasses.replace(model_cfg, vocab_size=tok.vocab_size)
    per_token = weight_flops_per_token(model_cfg, src_share)
    print(f"data     {len(train):,} train / {len(dev):,} dev / {len(test):,} test pairs (en->vi), vocab {tok.vocab_size}, "
          f"prepared in {time.perf_counter() - t0:.0f}s", flush=True)

    def mfu(tokens_per_s: float) -> str:
        return f"{100 * tokens_per_s * per_token / (peak * 1e12):.1f}%" if peak else "-"

    if args.probe_steps:
        print(f"\nprobe: {args.probe_steps} updates of fit, {train_keys['max_tokens']} tokens x {train_keys['accumulation']} "
              f"per update", flush=True)
        print(f"{'loop (tokens/s: the last third)':<34}{'tokens/s':>12}{'MFU':>8}{'wall s':>9}", flush=True)
        for compiled in (False, True):
            # steady state: the last third of the updates (the first holds Dynamo's compilations, and warm-up)
            cfg = TrainConfig(**(train_keys | dict(max_steps=args.probe_steps, validate_every=0, max_epochs=1000,
                                                    patience=0, dev_limit=8, log_every=max(args.probe_steps // 3, 1),
                                                    compile=compiled)))
            windows: list[float] = []
            started = time.perf_counter()

            def on_probe_step(m):  # a line per third: Dynamo's first compilation alone can take a minute
                windows.append(m["train/tokens_per_s"])
                print(f"  step {m['step']:>6}  {m['train/tokens_per_s']:,.0f} tok/s", flush=True)

            fit(cfg, model_cfg, encoded, dev[:8], tok, device=device, on_step=on_probe_step)
            print(f"{'fit, ' + ('compiled' if compiled else 'eager'):<34}{windows[-1]:>12,.0f}"
                  f"{mfu(windows[-1]):>8}{time.perf_counter() - started:>9.0f}", flush=True)
        rows = max(train_keys["max_tokens"] // 32, 1)
        g = torch.Generator().manual_seed(0)
        batches = [(torch.randint(4, tok.vocab_size, (rows, 32), generator=g).to(device),
                    torch.randint(4, tok.vocab_size, (rows, 32), generator=g).to(device),
                    torch.randint(4, tok.vocab_size, (rows, 32), generator=g).to(device)) for _ in range(2)]
        from mtcore.nmt.model import build_model

        torch.manual_seed(0)
        secs = measure(build_model(model_cfg).to(device), batches, device, 20, True)
        fixed = 2 * rows * 32 / secs
        print(f"{'anchor: step on a fixed 32+32 batch':<34}{fixed:>12,.0f}{mfu(fixed):>8}", flush=True)

    if args.minutes:
        cfg = TrainConfig(**(train_keys | dict(time_budget_min=args.minutes, compile=args.compile_bleu)))
        print(f"\nBLEU run: base, {args.minutes:g} min of training ({'compiled' if args.compile_bleu else 'eager'}), "
              f"validation every {cfg.validate_every} updates", flush=True)

        def on_validation(m, state):
            print(f"  step {m['step']:>6}  dev/loss {m['dev/loss']:.3f}  dev/bleu {m['dev/bleu']:.2f}", flush=True)

        def on_step(m):
            print(f"  step {m['step']:>6}  train/loss {m['train/loss']:.3f}  {m['train/tokens_per_s']:,.0f} tok/s "
                  f"(MFU {mfu(m['train/tokens_per_s'])})", flush=True)

        result = fit(cfg, model_cfg, encoded, dev, tok, device=device, on_step=on_step, on_validation=on_validation)
        started = time.perf_counter()
        hyps = translate(result.model, tok, [s for s, _ in test], beam=5, batch_size=64)
        decode_s = time.perf_counter() - started
        refs = [t for _, t in test]
        bleu, chrf = corpus_bleu(hyps, refs), corpus_chrf(hyps, refs)
        print(f"\ntrain    {result.steps} updates in {result.elapsed_s / 60:.2f} min ({result.stop_reason}), "
              f"{result.tokens_per_s:,.0f} tokens/s (MFU {mfu(result.tokens_per_s)}, validations included)")
        print(f"test     {len(test):,} pairs, beam 5, {decode_s:.1f}s ({len(test) / decode_s:.0f} sentences/s)")
        print(f"test/bleu {bleu.score:.2f}  {bleu.signature}")
        print(f"test/chrf {chrf.score:.2f}  {chrf.signature}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
