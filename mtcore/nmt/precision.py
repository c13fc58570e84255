"""Which number format training computes in: bf16 autocast where the hardware does bf16 natively.

`train.bf16` (default on) asks for it; it is used on CUDA GPUs with bf16 and on CPUs with native
bf16 instructions (AVX512-BF16 or AMX: Intel Cooper Lake/Sapphire Rapids and later, AMD Zen 4 and
later). Elsewhere bf16 is emulated and training stays fp32. Weights, optimiser state and the loss's
softmax stay fp32 either way (mixed precision, Micikevicius et al. 2018); only the matmuls' inputs
are bf16. On the CPU, attention itself runs in fp32 (`mtcore.nmt.model.MultiHeadAttention`).

Validation (dev loss, greedy decoding) uses autocast only on CUDA: on the CPU its small per-step
matmuls gain nothing from bf16 and its figures stay comparable with fp32 runs.
"""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path

import torch

_CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@functools.lru_cache(maxsize=1)
def cpu_has_native_bf16() -> bool:
    """True if this CPU has bf16 instructions (Linux: read from /proc/cpuinfo; elsewhere False)."""
    try:
        flags = next((line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), "")
    except OSError:
        return False
    return any(flag in flags.split() for flag in _CPU_BF16_FLAGS)


def uses_bf16(device_type: str, want_bf16: bool) -> bool:
    """Whether training on `device_type` ("cuda" | "cpu") computes in bf16 under `train.bf16 = want_bf16`."""
    if not want_bf16:
        return False
    if device_type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return device_type == "cpu" and cpu_has_native_bf16()


def precision_label(use_gpu: bool, want_bf16: bool) -> str:
    """What the plan prints. GPU workers check their own GPUs (the driver may have none); CPU workers are
    taken to be this machine's CPU."""
    if not want_bf16:
        return "fp32"
    if use_gpu:
        return "bf16 autocast"
    return "bf16 autocast (CPU with native bf16)" if cpu_has_native_bf16() else "fp32 (this CPU has no native bf16)"


def training_autocast(device: torch.device, want_bf16: bool):
    """The context training's forward passes run in."""
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=uses_bf16(device.type, want_bf16))


def validation_autocast(device: torch.device, want_bf16: bool):
    """The context validation runs in: bf16 on CUDA as training, fp32 on the CPU."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    return training_autocast(device, want_bf16)
