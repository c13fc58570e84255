"""What this machine's CPU can do, read without importing torch (job files and plans load in a second).

`cpu_trains_in_bf16` decides whether CPU workers train in bf16 (`mtcore.nmt.precision`, the pair
classifier) and which `preset: auto` rule applies (`mtcore.config.auto_settings`). On a multi-node CPU cluster the driver's
CPU decides the rule and each worker its own precision: keep a cluster's CPUs alike, or pass `train.bf16`.
"""

from __future__ import annotations

import functools
from pathlib import Path

_CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # AVX512-BF16 (Cooper Lake, Zen 4 and later), AMX (Sapphire Rapids)


@functools.lru_cache(maxsize=1)
def cpu_has_native_bf16() -> bool:
    """True if this CPU has bf16 instructions (Linux: read from /proc/cpuinfo; elsewhere False)."""
    try:
        flags = next((line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), "")
    except OSError:
        return False
    return any(flag in flags.split() for flag in _CPU_BF16_FLAGS)


def cpu_trains_in_bf16(want_bf16: bool) -> bool:
    """Whether a CPU worker on this machine computes in bf16 when `want_bf16` asks for it."""
    return bool(want_bf16) and cpu_has_native_bf16()


def training_precision(use_gpu: bool, want_bf16: bool) -> str:
    """"bf16" or "fp32": what a run's workers compute in, as this driver can tell (GPU workers without
    native bf16, pre-Ampere, fall back to fp32 on their own)."""
    return "bf16" if want_bf16 and (use_gpu or cpu_has_native_bf16()) else "fp32"


def precision_label(use_gpu: bool, want_bf16: bool) -> str:
    """What the plan prints. GPU workers check their own GPUs (the driver may have none); CPU workers are
    taken to be this machine's CPU."""
    if not want_bf16:
        return "fp32"
    if use_gpu:
        return "bf16 autocast"
    return "bf16 autocast (CPU with native bf16)" if cpu_trains_in_bf16(want_bf16) else "fp32 (this CPU has no native bf16)"
