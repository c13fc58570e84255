"""Search Transformer hyperparameters with Ray Tune; every trial is a Ray Train DDP run tracked in MLflow.

    python experiments/tune_transformer.py                                  # 12 trials of 800 steps around the default, ASHA
    python experiments/tune_transformer.py train.max_steps=0 train.time_budget_min=15  # 15-minute trials: auto re-picks mini
    python experiments/tune_transformer.py --num-samples 8 --scheduler fifo --time-budget 30
    python experiments/tune_transformer.py --search optuna                  # needs: pip install 'mtcore[optuna]'
    python experiments/tune_transformer.py --resume                         # continue an interrupted search
    python experiments/tune_transformer.py --search-space experiments/configs/space_arch.yaml   # Transformer vs RNN
    python experiments/tune_transformer.py --workers-per-trial 1 train.max_steps=400
    python experiments/tune_transformer.py --data runs/backtranslate --dry-run     # the resource plan, on the augmented set

The search space is the `search:` section of the config (the default: mtcore/distributed/default_search.yaml,
which searches heads, warmup, label smoothing and the learning-rate scale around the job `preset: auto`
trains for the trial budget, and runs that job's own values as its first trial).
Resources: workers per trial × concurrent trials never exceed the CPUs (GPUs); on 2 CPUs the
default is one trial at a time on 2 DDP workers (`--workers-per-trial 1` runs 2 trials × 1 worker).
The search is a parent MLflow run (experiment tune_transformer) with one child run per trial; the
best trial's model is registered as mtcore-en-vi-transformer.
"""

from __future__ import annotations

import argparse
import sys

from mtcore import tracking
from mtcore.console import add_common_options
from mtcore.errors import entry_point
from mtcore.config import ConfigError
from mtcore.distributed.ray_training import JobError
from mtcore.distributed.tune import DEFAULT_SEARCH, SCHEDULERS, SEARCHERS, TuneError, TuneJob, format_table, plan_search, run_search
from mtcore.distributed.tune.driver import describe_scheduler

DEFAULT_CONFIG = DEFAULT_SEARCH


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    """The options and the base job's `section.key=value` overrides they stand for."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(DEFAULT_CONFIG), help="job YAML with job/model/train/search sections (default: %(default)s)")
    ap.add_argument("--search-space", metavar="YAML", help="a file mapping keys to {choice|grid|uniform|...}: replaces the config's search.space")
    ap.add_argument("--num-samples", type=int, help="configurations to sample")
    ap.add_argument("--workers-per-trial", type=int, help="Ray Train workers per trial (default: 2 CPU workers, or 1 GPU)")
    ap.add_argument("--gpus-per-worker", type=int, choices=(0, 1), help="0: CPU workers; 1: one GPU per worker (default: 1 if the cluster has GPUs)")
    ap.add_argument("--concurrent-trials", type=int, help="trials at once (default: as many as the CPUs/GPUs allow)")
    ap.add_argument("--scheduler", choices=SCHEDULERS, help="asha: early stopping at validations (on search.asha.metric: dev loss in the default search, dev BLEU where a --config search leaves it unset); halving: every trial trains to the first rung and waits, then the best 1/rf go on (same rungs); fifo: every trial runs to the end")
    ap.add_argument("--search", choices=SEARCHERS, help="random (always available) or optuna (optional dependency)")
    ap.add_argument("--seed", type=int, help="sampling seed: the same seed samples the same configurations")
    ap.add_argument("--time-budget", type=float, metavar="MIN", help="wall-clock minutes for the whole search")
    again = ap.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true", help="continue the interrupted search with these settings")
    again.add_argument("--overwrite", action="store_true", help="start a search with these settings again from scratch")
    ap.add_argument("--data", help="training corpus: any corpus path, or a stage output such as runs/backtranslate")
    ap.add_argument("--dry-run", action="store_true", help="print the resource plan and the search space, and stop")
    ap.add_argument("overrides", nargs="*", help="base job overrides, section.key=value, e.g. train.max_steps=400")
    add_common_options(ap)
    args = ap.parse_intermixed_args(argv)  # overrides before, between or after the options
    return args, list(args.overrides) + ([f"job.train_data={args.data}"] if args.data else [])


def load_job(args: argparse.Namespace, overrides: list[str]) -> TuneJob:
    return TuneJob.load(
        args.config, overrides, space_file=args.search_space, num_samples=args.num_samples,
        workers_per_trial=args.workers_per_trial, gpus_per_worker=args.gpus_per_worker,
        concurrent_trials=args.concurrent_trials, scheduler=args.scheduler, search=args.search, seed=args.seed,
        time_budget_min=args.time_budget,
    )


@entry_point
def main(argv: list[str] | None = None) -> int:
    args, overrides = parse_args(argv)
    try:
        tj = load_job(args, overrides)
        if args.dry_run:
            if tj.base.job.train_data:  # a given corpus must exist, as the search would find (the embedded one is not cleaned here)
                from mtcore.distributed.ray_training import resolve_train_data

                resolve_train_data(tj.base)
            print(f"resources    {plan_search(tj).describe()}")
            grid = "" if tj.search.trials == tj.search.num_samples else f" ({tj.search.num_samples} samples × the grid)"
            print(f"trials       {tj.search.trials}{grid}, {tj.search.scheduler} scheduler, {tj.search.search} search"
                  + ("; the first is the base job's values (search.start_from_base)" if tj.search.start_from_base else ""))
            print(f"scheduler    {describe_scheduler(tj)}")
            m, t = tj.base.run.model, tj.base.run.train
            print(f"base         {m.arch} {m.d_model}d × {m.layers} layers, {m.direction}; "
                  + (f"{t.max_steps:,} steps" if t.max_steps else f"{t.time_budget_min:g} min") + " a trial"
                  + (f" ({tj.base.preset_note})" if tj.base.preset_note else ""))
            for param in tj.search.space:
                print(f"space        {param.key}: {param.describe()}")
            print(f"MLflow       experiment {tj.search.experiment}" + (f", search name {tj.search.name}" if tj.search.name else
                  " (named when it starts; the same arguments and --resume find it again)"))
            return 0
        # -q: the summary only; default: a line per trial start, validation and end; -v: also Ray Tune's reporter
        out = run_search(tj, resume=args.resume, overwrite=args.overwrite, verbose=args.verbosity + 1)
    except (ConfigError, JobError, TuneError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print()
    print(f"search       {out.name}  (MLflow parent run {out.parent_run_id})")
    print(f"resources    {out.plan.describe()}")
    print(f"spent        {out.trial_minutes:.1f} trial-minutes in {out.elapsed_s / 60:.1f} min")
    print()
    print(format_table(out.rows, tj.search.space))
    print()
    if out.interrupted:
        print("interrupted: the finished trials are kept; continue with the same arguments and --resume")
        return 1
    if out.best is None:
        failed = sum(r.status == "FAILED" for r in out.rows)
        why = (f"{failed} failed: see the errors above" if failed else
               "the search's time budget ran out before any trial validated" if out.budget_hit else "none validated")
        print(f"no trial finished ({len(out.rows)} of {tj.search.trials} started; {why})")
        return 1
    print(f"best trial   {out.best.trial_id}: {out.best.values}")
    print(f"best dev     BLEU {out.best.best_dev_bleu:.2f}  (MLflow run {out.best.mlflow_run_id})")
    print(f"test BLEU    {out.test['test/bleu']:.2f}  {out.test['test/bleu_signature']}")
    if out.registered:
        print(f"registered   {out.registered}  (models:/{out.registered})")
    print(f"browse       {tracking.browse_hint()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
