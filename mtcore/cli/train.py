"""Train the mtcore Transformer with Ray Train DDP and track it in MLflow.

    python experiments/train_transformer.py                                   # preset auto, 11 minutes, embedded corpus
    python experiments/train_transformer.py --data runs/backtranslate          # the main job's augmented set
    python experiments/train_transformer.py --data my_corpus.tsv train.time_budget_min=30
    python experiments/train_transformer.py --config experiments/configs/base.yaml --gpu
    python experiments/train_transformer.py --config experiments/configs/base.yaml --gpu --dry-run   # the plan only
    python experiments/train_transformer.py --workers 1 model.heads=8 train.warmup=2000 job.test_limit=500
    python experiments/train_transformer.py --config experiments/configs/small.yaml --average 5 train.average_every=100

A rerun with the same settings (or the same job.run_name) resumes from its latest checkpoint.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

import yaml

from mtcore import tracking
from mtcore.console import add_common_options, quiet
from mtcore.errors import entry_point
from mtcore.config import ConfigError
from mtcore.distributed.jobs import DEFAULT_JOB
from mtcore.distributed.ray_training import JobError, check_heldout_data, load_and_plan, resolve_train_data, run_training

DEFAULT_CONFIG = DEFAULT_JOB


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    """The options and the `section.key=value` overrides they stand for."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(DEFAULT_CONFIG), help="job YAML with job/model/train sections (default: %(default)s)")
    ap.add_argument("--data", help="training corpus: any corpus path, or a stage output such as runs/backtranslate "
                                   "(default: the embedded corpus, cleaned)")
    ap.add_argument("--workers", type=int, help="Ray Train workers (default: all GPUs, else 2 CPU workers)")
    ap.add_argument("--gpu", action="store_true", help="train on GPUs (default: when the cluster has them)")
    ap.add_argument("--run-name", help="MLflow/Ray run name (default: derived from the settings)")
    ap.add_argument("--average", type=int, metavar="N", help="end with the mean of the last N (>= 2; 0: none) weight "
                    "snapshots if it validates better (train.average_last; preset auto on CPU: 8, 25 steps apart)")
    ap.add_argument("--dry-run", action="store_true", help="print the resource plan and stop")
    ap.add_argument("--print-config", action="store_true", help="print the resolved config (YAML) and stop")
    ap.add_argument("overrides", nargs="*", help="section.key=value, e.g. model.heads=8 train.warmup=2000")
    add_common_options(ap)
    args = ap.parse_intermixed_args(argv)  # overrides before, between or after the options
    if args.average is not None and (args.average == 1 or args.average < 0):
        ap.error(f"--average {args.average}: the mean of N >= 2 snapshots (0: none)")
    overrides = list(args.overrides)
    for flag, key in ((args.data, "job.train_data"), (args.workers, "job.workers"), (args.run_name, "job.run_name"),
                      (args.average, "train.average_last")):
        if flag is not None:
            overrides.append(f"{key}={flag}")
    if args.gpu:
        overrides.append("job.use_gpu=yes")
    return args, overrides


@entry_point
def main(argv: list[str] | None = None) -> int:
    args, overrides = parse_args(argv)
    try:
        # --print-config > job.yaml: stdout is the YAML alone (the local Ray's start line went there too)
        with contextlib.redirect_stdout(sys.stderr) if args.print_config else contextlib.nullcontext():
            job, plan = load_and_plan(args.config, overrides)
        if args.print_config:
            print(yaml.safe_dump(job.to_dict(), sort_keys=False, allow_unicode=True), end="")
            return 0
        if args.dry_run or not quiet():  # -q: the final summary (and warnings) only
            print("\n".join(plan.lines()), flush=True)
        if args.dry_run:  # a missing or unreadable corpus is said now, as the search's dry run says it
            check_heldout_data(job, read=True)
            if job.job.train_data:
                resolve_train_data(job)
            return 0
        outcome = run_training(job)
    except (ConfigError, JobError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    t = outcome.test
    print(f"run          {outcome.run_name}  (MLflow run {outcome.mlflow_run_id})")
    print(f"workers      {outcome.workers} × {'GPU' if outcome.use_gpu else 'CPU'}, {outcome.steps} steps, {outcome.elapsed_s / 60:.1f} min")
    chosen = (f"dev loss {outcome.best_dev_loss:.3f}" if job.run.train.best_metric == "loss"  # what chose it
              else f"dev BLEU {outcome.best_dev_bleu:.2f}")
    print(f"best ckpt    {chosen}  ({outcome.best_checkpoint})")
    print(f"test BLEU    {t['test/bleu']:.2f}  {t['test/bleu_signature']}")
    print(f"test chrF    {t['test/chrf']:.2f}  {t['test/chrf_signature']}")
    print(f"browse       {tracking.browse_hint()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
