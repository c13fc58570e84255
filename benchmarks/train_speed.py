"""Training throughput (tokens/s) of mtcore's Transformer, and MFU on CUDA.

    python benchmarks/train_speed.py [--presets small base] [--steps 5] [--max-tokens 2048] [--seq-len 32]
    python benchmarks/train_speed.py --gpu --compile --presets base big --max-tokens 32768 --seq-len 64 --steps 30

Each step is mtcore's training step (forward, label-smoothed loss, backward, clipping,
Adam with the Noam schedule; bf16 autocast where the hardware has bf16: CUDA, or a CPU with
AVX512-BF16/AMX, `mtcore.nmt.precision`) on synthetic batches of fixed shape:
rows x seq-len source tokens and as many target tokens, no padding, so token counts and
FLOPs are exact. tokens/s counts source + target tokens.

Anchors, measured in the same run on the same batches: `torch.nn.Transformer` of the same
shape (same embeddings/output projection and loss around it, same autocast), and, where mtcore
trains in bf16, mtcore's own step in fp32 (`--no-bf16`'s figure); the figure is the ratio.
`--compile` adds mtcore's step with the model under `torch.compile` (`train.compile`).

FLOPs per step (the PaLM-paper accounting, Chowdhery et al. 2022, App. B, split by stack):
a matmul with P weights costs 2P FLOPs per token forward, 4P backward, so
  6 * (P_enc * src_tokens + (P_dec + V * d) * tgt_tokens)          # weights; V*d: output projection
+ 12 * layers * d * (S * src_tokens + (T + S) * tgt_tokens)         # attention scores and values
where P_enc/P_dec are the encoder/decoder weight-matrix parameters, S/T the source/target
lengths (decoder self-attention over T, cross-attention over S; the causal half is counted
in full, as in PaLM). Embedding lookups, LayerNorm, softmax and biases are ignored.
MFU = FLOPs/s / the GPU's dense bf16 peak (`--peak-tflops`, default by device name).
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
import torch.nn as nn

from mtcore.config import ModelConfig, TrainConfig
from mtcore.hardware import precision_label
from mtcore.nmt.model import build_model
from mtcore.nmt.precision import training_autocast, uses_bf16
from mtcore.nmt.tokenizer import BOS_ID
from mtcore.nmt.training import accumulate_gradients, make_optimizer

PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "L4": 121.0, "A10": 125.0}  # dense, SXM


def default_peak(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)


def weight_matrix_params(cfg: ModelConfig) -> tuple[int, int]:
    """(encoder, decoder + output projection) weight-matrix parameters: what a source / target token meets."""
    d, L, f = cfg.d_model, cfg.layers, cfg.d_ff
    p_enc = L * (4 * d * d + 2 * d * f)  # self-attention q,k,v,o + FFN
    p_dec = L * (8 * d * d + 2 * d * f)  # self- and cross-attention + FFN
    return p_enc, p_dec + cfg.vocab_size * d


def train_flops(cfg: ModelConfig, rows: int, S: int, T: int) -> float:
    p_src, p_tgt = weight_matrix_params(cfg)
    src_tok, tgt_tok = rows * S, rows * T
    weights = 6 * (p_src * src_tok + p_tgt * tgt_tok)
    attention = 12 * cfg.layers * cfg.d_model * (S * src_tok + (T + S) * tgt_tok)
    return float(weights + attention)


class TorchTransformer(nn.Module):
    """The anchor: nn.Transformer with the same shape, embeddings and tied output projection."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.core = nn.Transformer(cfg.d_model, cfg.heads, cfg.layers, cfg.layers, cfg.d_ff, cfg.dropout,
                                   batch_first=True, norm_first=cfg.pre_norm)

    def forward(self, src, tgt_in):
        mask = nn.Transformer.generate_square_subsequent_mask(tgt_in.size(1), device=src.device)
        h = self.core(self.embed(src), self.embed(tgt_in), tgt_mask=mask, tgt_is_causal=True)
        return h @ self.embed.weight.T


def measure(model, batches, device, steps, bf16, compile_model=False) -> float:
    """Seconds per step, after warm-up steps (one; three compiled: Dynamo compiles at the first)."""
    opt, sched = make_optimizer(model, TrainConfig(warmup=100), model.cfg.d_model)
    autocast = training_autocast(device, bf16)
    net = torch.compile(model) if compile_model else model
    model.train()
    rows, S = batches[0][0].shape

    def step(src, tgt_in, tgt_out):  # the training loop's own step (mtcore.nmt.training.fit)
        accumulate_gradients(net, [(src, tgt_in, tgt_out)], 0.1, autocast, device, counts=[(rows * S, rows * S)])
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)

    for i in range(3 if compile_model else 1):
        step(*batches[i % len(batches)])
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for i in range(steps):
        step(*batches[i % len(batches)])
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--presets", nargs="+", default=["small", "base"])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--max-tokens", type=int, default=2048, help="rows x seq-len per batch")
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: steady on a shared machine)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--gpu", action="store_true", help="on the first CUDA GPU; stops with one line if there is none")
    p.add_argument("--compile", action="store_true", help="add a row: mtcore's step with the model under torch.compile")
    p.add_argument("--peak-tflops", type=float, default=None, help="bf16 dense peak; default by GPU name")
    p.add_argument("--no-bf16", action="store_true")
    p.add_argument("--no-anchor", action="store_true")
    args = p.parse_args(argv)
    if args.gpu:
        if not torch.cuda.is_available():
            p.error("--gpu: torch sees no CUDA GPU here")
        args.device = "cuda"
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    peak = args.peak_tflops or default_peak(device)
    rows, S = max(args.max_tokens // args.seq_len, 1), args.seq_len
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} thread(s)"
    bf16 = uses_bf16(device.type, not args.no_bf16)
    print(f"device   {name}; torch {torch.__version__}; {precision_label(device.type == 'cuda', not args.no_bf16)}")
    print(f"batch    {rows} rows x {S} source + {S} target tokens, vocab {args.vocab}, {args.steps} timed steps")
    print(f"peak     {f'{peak:.0f} TFLOP/s bf16' if peak else 'n/a (no MFU)'}\n")
    g = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(2):
        src = torch.randint(4, args.vocab, (rows, S), generator=g)
        tgt = torch.randint(4, args.vocab, (rows, S), generator=g)
        tgt_in = torch.cat([torch.full((rows, 1), BOS_ID), tgt[:, :-1]], dim=1)
        batches.append((src.to(device), tgt_in.to(device), tgt.to(device)))
    print(f"{'preset':<8}{'model':<16}{'tokens/s':>12}{'s/step':>9}{'TFLOP/s':>9}{'MFU':>8}{'vs anchor':>11}")
    for preset in args.presets:
        cfg = ModelConfig.preset(preset, vocab_size=args.vocab)
        flops = train_flops(cfg, rows, S, S)
        results = {}
        kinds = (["mtcore"] + (["mtcore compiled"] if args.compile else []) + (["mtcore fp32"] if bf16 else [])
                 + ([] if args.no_anchor else ["nn.Transformer"]))
        for kind in kinds:
            torch.manual_seed(0)
            model = (TorchTransformer(cfg) if kind == "nn.Transformer" else build_model(cfg)).to(device)
            secs = measure(model, batches, device, args.steps, not args.no_bf16 and kind != "mtcore fp32",
                           compile_model=kind == "mtcore compiled")
            tps = 2 * rows * S / secs
            results[kind] = tps
            tflops = flops / secs / 1e12
            mfu = f"{100 * tflops / peak:.1f}%" if peak else "-"
            ratio = f"{results['mtcore'] / tps:.2f}x" if kind != "mtcore" else ""
            print(f"{preset:<8}{kind:<16}{tps:>12.0f}{secs:>9.3f}{tflops:>9.2f}{mfu:>8}{ratio:>11}", flush=True)
            del model
    print("\ntokens/s = (source + target tokens) / s; 'vs anchor' = mtcore tokens/s / that row's tokens/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
