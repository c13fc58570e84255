"""The resource plan of a training job: what `--dry-run` prints and what `run_training` runs.

Decided once, from the job and the Ray cluster's resources, before any data is read:
workers × devices, the DDP backend, the precision, the batch per worker and per step, the
model (and, for `preset: auto`, why), and the steps the budget buys where this machine has
measured them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from mtcore.distributed.jobs import TrainingJob
from mtcore.errors import MtcoreError
from mtcore.hardware import cpu_trains_in_bf16, precision_label


class PlanError(MtcoreError, ValueError):
    """A job that cannot run on the resources at hand; the message names the setting."""


# Optimiser steps per minute of 2 CPU cores at 3,000 tokens per step (the `auto` CPU batch: 2 workers ×
# 1,500), measured by benchmarks/budget_curve.py on the 2-core development machine (benchmarks/RESULTS.md;
# one process with 2 threads, CPU-time clock), in fp32 and, with its CPU's native bf16, in bf16. Used only to
# print the expected steps of a CPU run with that batch; elsewhere the plan says "not measured".
CPU_STEPS_PER_MIN = {"fp32": {"tiny": 182.9, "mini": 110.6, "small": 47.4}, "bf16": {"tiny": 332.6, "mini": 244.6, "small": 119.0}}
_CPU_BATCH = 3000  # tokens per step in those measurements


@dataclass(frozen=True)
class TrainingPlan:
    workers: int
    use_gpu: bool
    cpus: int  # in the cluster
    gpus: int  # in the cluster
    backend: str  # nccl | gloo
    precision: str  # bf16 autocast | fp32, and ", torch.compile" with train.compile
    max_tokens: int  # padded tokens per batch per worker
    accumulation: int
    model: str  # e.g. "transformer 128d × 2 layers, 4 heads"
    params: int
    preset_note: str
    budget_min: float
    expected_steps: int | None  # None: not measured for this model, batch and device
    warmup: int = 0
    max_steps: int = 0
    approx_steps: int = 0  # the measured rate scaled by tokens per step: for the warm-up warning only

    @property
    def tokens_per_step(self) -> int:
        return self.max_tokens * self.accumulation * self.workers

    def lines(self) -> list[str]:
        device = "GPU" if self.use_gpu else "CPU"
        steps = f"~{self.expected_steps:,} (measured rate on 2 CPU cores)" if self.expected_steps else "not measured here"
        budget = f"{self.budget_min:g} min" if self.budget_min else "none (max_steps / max_epochs / patience)"
        return [
            f"workers      {self.workers} × {device} (cluster: {self.cpus} CPUs, {self.gpus} GPUs), backend {self.backend}",
            f"precision    {self.precision}",
            f"batch        {self.max_tokens:,} tokens per worker × {self.accumulation} accumulation × {self.workers} "
            f"workers = {self.tokens_per_step:,} tokens per step",
            f"model        {self.model}, {self.params / 1e6:.1f}M parameters",
            *([f"preset       {self.preset_note}"] if self.preset_note else []),
            f"budget       {budget}; expected steps {steps}",
            *self.warnings(),
        ]

    def warnings(self) -> list[str]:
        """A warm-up the run never finishes: the learning rate peaks at warmup steps, so a run that ends before
        is a run at a fraction of its rate (a named preset keeps the paper's 4,000 on an 11-minute CPU budget)."""
        ends = [n for n in (self.max_steps, self.expected_steps or self.approx_steps) if n]
        last = min(ends) if ends else 0
        if last and self.warmup > last:
            return [f"warning      warm-up {self.warmup:,} steps > the run's ~{last:,}: the learning rate never reaches "
                    f"its peak ({100 * last / self.warmup:.0f} % of it at the end); lower train.warmup"]
        return []


def local_gpus() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except ImportError:
        return 0


def check_gpu_request(job: TrainingJob) -> None:
    """`--gpu` on a machine with none fails here, before Ray starts (a cluster, in RAY_ADDRESS or already
    joined, is asked by `scaling_for`)."""
    import ray

    if job.job.use_gpu == "yes" and not ray.is_initialized() and not os.environ.get("RAY_ADDRESS") and local_gpus() == 0:
        raise PlanError("job.use_gpu=yes (--gpu) but this machine has no CUDA GPU and RAY_ADDRESS names no cluster; "
                        "drop --gpu to train on CPU workers")


def scaling_for(job: TrainingJob, cpus: int, gpus: int) -> tuple[int, bool]:
    """(workers, use_gpu): every GPU if there are any, else 2 CPU workers; never more workers than devices."""
    use_gpu = {"yes": True, "no": False}.get(job.job.use_gpu, gpus > 0)
    if use_gpu and gpus == 0:
        raise PlanError("job.use_gpu=yes (--gpu) but the Ray cluster has no GPUs")
    limit = gpus if use_gpu else cpus
    workers = job.job.workers or (gpus if use_gpu else min(2, cpus))
    if workers > limit:
        raise PlanError(f"job.workers={workers} but the cluster has only {limit} {'GPUs' if use_gpu else 'CPUs'}")
    return workers, use_gpu


def count_parameters(job: TrainingJob) -> int:
    import torch

    from mtcore.nmt.model import build_model

    with torch.device("meta"):  # shapes only: no memory, no initialisation cost, even for `big`
        model = build_model(job.run.model, vocab_size=job.run.model.vocab_size or job.job.vocab_size)
    return sum(p.numel() for p in model.parameters())


def make_plan(job: TrainingJob, cpus: int, gpus: int) -> TrainingPlan:
    workers, use_gpu = scaling_for(job, cpus, gpus)
    m, t = job.run.model, job.run.train
    shape = f"{m.arch} {m.d_model}d × {m.layers} layers" + (f", {m.heads} heads" if m.arch == "transformer" else "")
    rates = CPU_STEPS_PER_MIN["bf16" if cpu_trains_in_bf16(t.bf16) else "fp32"]
    preset = next((name for name in rates if _is_preset(job, name)), None)
    expected, approx = None, 0
    tokens = t.max_tokens * t.accumulation * workers
    if not use_gpu and preset and t.time_budget_min and workers == 2 and tokens == _CPU_BATCH:
        expected = int(rates[preset] * t.time_budget_min)
        if t.max_steps:  # the step cap ends the run first when it is lower
            expected = min(expected, t.max_steps)
    elif not use_gpu and preset and t.time_budget_min and workers == 2:  # about as many tokens a minute
        approx = int(rates[preset] * t.time_budget_min * _CPU_BATCH / tokens)
    return TrainingPlan(
        workers=workers, use_gpu=use_gpu, cpus=cpus, gpus=gpus, backend="nccl" if use_gpu else "gloo",
        precision=precision_label(use_gpu, t.bf16) + (", torch.compile" if t.compile else ""), max_tokens=t.max_tokens,
        accumulation=t.accumulation, model=shape, params=count_parameters(job), preset_note=job.preset_note,
        budget_min=t.time_budget_min, expected_steps=expected, warmup=t.warmup, max_steps=t.max_steps,
        approx_steps=approx,
    )


def _is_preset(job: TrainingJob, name: str) -> bool:
    from mtcore.config import PRESETS

    m = job.run.model
    return m.arch == "transformer" and all(getattr(m, k) == v for k, v in PRESETS[name].items())
