"""Which number format training computes in: bf16 autocast where the hardware does bf16 natively.

`train.bf16` (default on) asks for it; it is used on CUDA GPUs with bf16 and on CPUs with native
bf16 instructions (AVX512-BF16 or AMX) that measure faster than fp32 (`mtcore.hardware`). Elsewhere
bf16 is emulated or no faster, and training stays fp32. Weights, optimiser state and the loss's softmax stay fp32 either way (mixed precision, Micikevicius et al. 2018); only the matmuls' inputs
are bf16. On the CPU, attention itself runs in fp32 (`mtcore.nmt.model.MultiHeadAttention`).

Validation (dev loss, greedy decoding) uses autocast only on CUDA: on the CPU its small per-step
matmuls gain nothing from bf16 and its figures stay comparable with fp32 runs.
"""

from __future__ import annotations

import contextlib

import torch

from mtcore.hardware import cpu_trains_in_bf16


def uses_bf16(device_type: str, want_bf16: bool) -> bool:
    """Whether training on `device_type` ("cuda" | "cpu") computes in bf16 under `train.bf16 = want_bf16`."""
    if not want_bf16:
        return False
    if device_type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)
    return device_type == "cpu" and cpu_trains_in_bf16(want_bf16)


def training_autocast(device: torch.device, want_bf16: bool):
    """The context training's forward passes run in."""
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=uses_bf16(device.type, want_bf16))


def validation_autocast(device: torch.device, want_bf16: bool):
    """The context validation runs in: bf16 on CUDA as training, fp32 on the CPU."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    return training_autocast(device, want_bf16)
