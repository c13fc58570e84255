"""Ray Train DDP throughput: 1 vs 2 CPU workers, and Ray Train's overhead against the plain loop.

    python benchmarks/ddp_scaling.py [--preset small] [--steps 60] [--pairs 20000]

Same data (the first N pairs of the cleaned embedded corpus), same model, same
token budget per rank and the same number of optimiser steps in every setting:
- plain: `mtcore.nmt.training.fit` in this process (no Ray), 1 process;
- ray-1: Ray Train, 1 worker;  ray-2: Ray Train, 2 workers (gloo DDP).
tokens/s counts source + target non-pad tokens over all ranks, from the MLflow
`train/tokens_per_s` windows after the first (warm-up) one. Two workers on a
2-core machine also share those cores with Ray itself: expect little gain, and
read the figure as what DDP costs, not what a GPU node gains.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

import mlflow
import torch

from mtcore.distributed import ray_training
from mtcore.distributed.jobs import TrainingJob
from mtcore.data.paths import DEV, TEST


def job_for(preset: str, steps: int, pairs: int, workers: int, train_data: str) -> TrainingJob:
    return TrainingJob.from_dict({
        "job": {"train_data": train_data, "train_limit": pairs, "workers": workers, "test_limit": 50, "test_beam": 1,
                "log_model": False, "experiment": "bench_ddp_scaling", "run_name": f"ddp-{preset}-w{workers}-{steps}",
                "dev_data": str(DEV), "test_data": str(TEST)},
        "model": {"preset": preset, "pre_norm": True},
        "train": {"max_steps": steps, "log_every": 10, "validate_every": 0, "max_tokens": 2000, "dev_limit": 20,
                  "warmup": 200, "max_epochs": 100},
    })


def steady_tokens_per_s(run_id: str) -> float:
    history = sorted(mlflow.MlflowClient().get_metric_history(run_id, "train/tokens_per_s"), key=lambda m: m.step)
    values = [m.value for m in history[1:]] or [m.value for m in history]
    return sum(values) / len(values)


def plain_tokens_per_s(job: TrainingJob, spm: str, train_data: str) -> float:
    from mtcore.nmt.tokenizer import Tokenizer
    from mtcore.nmt.training import fit

    windows: list[float] = []
    tok = Tokenizer(spm)
    train = ray_training.load_pairs(train_data, job, job.job.train_limit)
    dev = ray_training.load_pairs(str(DEV), job, 20)
    fit(job.run.train, job.run.model, train, dev, tok, on_step=lambda m: windows.append(m["train/tokens_per_s"]))
    return sum(windows[1:]) / max(1, len(windows[1:]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="small")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--pairs", type=int, default=20000)
    args = ap.parse_args()
    os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{Path(tempfile.mkdtemp()) / 'bench.db'}")
    torch.set_num_threads(1)  # one core per process, as each Ray worker gets
    os.environ["MTCORE_HOME"] = tempfile.mkdtemp(prefix="mtcore-ddp-bench-")
    train_data = ray_training.resolve_train_data(TrainingJob())

    results = {}
    for workers in (1, 2):
        t0 = time.perf_counter()
        outcome = ray_training.run_training(job_for(args.preset, args.steps, args.pairs, workers, train_data))
        results[f"ray-{workers}"] = (steady_tokens_per_s(outcome.mlflow_run_id), time.perf_counter() - t0)
    job = job_for(args.preset, args.steps, args.pairs, 1, train_data)
    spm = str(ray_training.tokenizer_for(train_data, job))
    t0 = time.perf_counter()
    results["plain"] = (plain_tokens_per_s(job, spm, train_data), time.perf_counter() - t0)

    cpu = platform.processor() or platform.machine()
    print(f"\nDDP scaling, preset {args.preset}, {args.steps} steps, max_tokens 2000/rank, {os.cpu_count()} cores ({cpu})")
    print(f"{'setting':<10}{'tokens/s':>12}{'vs plain':>10}{'wall s':>9}")
    base = results["plain"][0]
    for name in ("plain", "ray-1", "ray-2"):
        tps, wall = results[name]
        print(f"{name:<10}{tps:>12,.0f}{tps / base:>9.2f}x{wall:>9.0f}")
    print(f"2 workers vs 1: {results['ray-2'][0] / results['ray-1'][0]:.2f}x")


if __name__ == "__main__":
    main()
