"""Train the mtcore Transformer with Ray Train DDP and track it in MLflow.

    python experiments/train_transformer.py                                   # `small` on the embedded corpus
    python experiments/train_transformer.py --config experiments/configs/base.yaml --gpu
    python experiments/train_transformer.py --workers 1 model.heads=8 train.warmup=2000 job.test_limit=500

A rerun with the same settings (or the same job.run_name) resumes from its latest checkpoint.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mtcore.errors import entry_point
from mtcore.config import ConfigError
from mtcore.distributed.jobs import TrainingJob
from mtcore.distributed.ray_training import JobError, run_training

DEFAULT_CONFIG = Path(__file__).parent / "configs" / "small.yaml"


@entry_point
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(DEFAULT_CONFIG), help="job YAML with job/model/train sections (default: %(default)s)")
    ap.add_argument("--workers", type=int, help="Ray Train workers (default: all GPUs, else 2 CPU workers)")
    ap.add_argument("--gpu", action="store_true", help="train on GPUs (default: when the cluster has them)")
    ap.add_argument("--run-name", help="MLflow/Ray run name (default: derived from the settings)")
    ap.add_argument("overrides", nargs="*", help="section.key=value, e.g. model.heads=8 train.warmup=2000")
    args = ap.parse_args(argv)
    overrides = list(args.overrides)
    if args.workers is not None:
        overrides.append(f"job.workers={args.workers}")
    if args.gpu:
        overrides.append("job.use_gpu=yes")
    if args.run_name:
        overrides.append(f"job.run_name={args.run_name}")
    try:
        job = TrainingJob.load(args.config, overrides)
        outcome = run_training(job)
    except (ConfigError, JobError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    t = outcome.test
    print(f"run          {outcome.run_name}  (MLflow run {outcome.mlflow_run_id})")
    print(f"workers      {outcome.workers} × {'GPU' if outcome.use_gpu else 'CPU'}, {outcome.steps} steps, {outcome.elapsed_s / 60:.1f} min")
    print(f"best dev     BLEU {outcome.best_dev_bleu:.2f}  ({outcome.best_checkpoint})")
    print(f"test BLEU    {t['test/bleu']:.2f}  {t['test/bleu_signature']}")
    print(f"test chrF    {t['test/chrf']:.2f}  {t['test/chrf_signature']}")
    print("browse       python -m mtcore.ui  (then http://127.0.0.1:5000)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
