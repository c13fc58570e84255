"""What this machine's CPU can do, read without importing torch (job files and plans load in a second).

`cpu_trains_in_bf16` decides whether CPU workers train in bf16 (`mtcore.nmt.precision`, the pair
classifier) and which `preset: auto` rule applies (`mtcore.config.auto_settings`). On a multi-node CPU cluster the driver's
CPU decides the rule and each worker its own precision: keep a cluster's CPUs alike, or pass `train.bf16`.

bf16 instructions are not enough: on a 2-core Intel Xeon VM that lists `avx512_bf16`, a bf16 matmul ran no
faster than fp32 and a `mini` training step ran at 0.71x fp32's tokens/s, where an AMD EPYC with the same flag
ran it at 1.44x (benchmarks/RESULTS.md, 2026-11-29). So bf16 is used where the flags are there *and* a
one-second measurement of the step's largest matmul says it pays; the result is kept per CPU model and torch
version in `~/.cache/mtcore/cpu_bf16.json`, so torch is imported for it once per machine, not per job.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import time
from pathlib import Path

_CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # AVX512-BF16 (Cooper Lake, Zen 4 and later), AMX (Sapphire Rapids)
BF16_MIN_SPEEDUP = 1.2  # this measurement gave 1.00x on the Xeon VM above; the EPYC's matmul alone ran 3.6x faster in bf16
CACHE_FILE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mtcore" / "cpu_bf16.json"


@functools.lru_cache(maxsize=1)
def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def cpu_has_bf16_flags() -> bool:
    """True if this CPU lists bf16 instructions (Linux: read from /proc/cpuinfo; elsewhere False)."""
    flags = next((line for line in _cpuinfo().splitlines() if line.startswith("flags")), "")
    return any(flag in flags.split() for flag in _CPU_BF16_FLAGS)


def measure_bf16_speedup() -> float:
    """fp32 time / bf16-autocast time of a forward and backward through `mini`'s output projection (a
    1,500-token batch, 128 -> 8,000) on one thread, best of 5: above 1, bf16 is faster here."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        gen = torch.Generator().manual_seed(0)
        weight = torch.randn(8000, 128, generator=gen, requires_grad=True)
        x = torch.randn(1500, 128, generator=gen, requires_grad=True)

        def best(bf16: bool) -> float:
            times = []
            for _ in range(6):  # the first is a warm-up
                t0 = time.perf_counter()
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    y = torch.nn.functional.linear(x, weight)
                y.float().sum().backward()
                times.append(time.perf_counter() - t0)
            return min(times[1:])

        return best(False) / best(True)
    finally:
        torch.set_num_threads(threads)


def _machine_key() -> str:
    import importlib.metadata

    model = next((line.split(":", 1)[1].strip() for line in _cpuinfo().splitlines() if line.startswith("model name")),
                 platform.processor())
    return f"{model} | {platform.machine()} | torch {importlib.metadata.version('torch')}"


@functools.lru_cache(maxsize=1)
def cpu_bf16_is_fast() -> bool:
    """True if this CPU has bf16 instructions and training's matmuls run at least BF16_MIN_SPEEDUP x faster in
    bf16 than in fp32 (measured once per CPU model and torch version, then read from CACHE_FILE)."""
    if not cpu_has_bf16_flags():
        return False
    key = _machine_key()
    try:
        known = json.loads(CACHE_FILE.read_text())
    except (OSError, ValueError):
        known = {}
    known = known if isinstance(known, dict) else {}
    if not isinstance(known.get(key), (int, float)):
        known[key] = round(measure_bf16_speedup(), 3)
        try:  # a read-only home only costs the measurement again next time
            CACHE_FILE.parent.mkdir(parents=True, exist_ok=True)
            tmp = CACHE_FILE.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(known, indent=1))
            tmp.replace(CACHE_FILE)
        except OSError:
            pass
    return known[key] >= BF16_MIN_SPEEDUP


def cpu_trains_in_bf16(want_bf16: bool) -> bool:
    """Whether a CPU worker on this machine computes in bf16 when `want_bf16` asks for it."""
    return bool(want_bf16) and cpu_bf16_is_fast()


def training_precision(use_gpu: bool, want_bf16: bool) -> str:
    """"bf16" or "fp32": what a run's workers compute in, as this driver can tell (GPU workers without
    native bf16, pre-Ampere, fall back to fp32 on their own)."""
    return "bf16" if want_bf16 and (use_gpu or cpu_bf16_is_fast()) else "fp32"


def precision_label(use_gpu: bool, want_bf16: bool) -> str:
    """What the plan prints. GPU workers check their own GPUs (the driver may have none); CPU workers are
    taken to be this machine's CPU."""
    if not want_bf16:
        return "fp32"
    if use_gpu:
        return "bf16 autocast"
    if cpu_trains_in_bf16(want_bf16):
        return "bf16 autocast (CPU with fast native bf16)"
    return "fp32 (bf16 is not faster on this CPU)" if cpu_has_bf16_flags() else "fp32 (this CPU has no native bf16)"
