"""Does the default search find a better model than the default job, at the same per-trial budget?

    python benchmarks/tune_vs_default.py                  # the default search vs the default job, about 4.5 minutes each
    python benchmarks/tune_vs_default.py --num-samples 8
    python benchmarks/tune_vs_default.py --fifo           # and the same 12 configurations without early stopping
    python benchmarks/tune_vs_default.py --fifo --set train.bf16=true   # the search in bf16 (a CPU with native bf16)
    python benchmarks/tune_vs_default.py --fifo --seed 1  # 12 other configurations
    python benchmarks/tune_vs_default.py --fifo --skip-anchor --scheduler halving   # the compute goal of another rule

Anchor: `experiments/train_transformer.py` (the default job, `preset: auto`) given the search's
per-trial training budget. Figure: the best trial of `experiments/tune_transformer.py` (the
default search, mtcore/distributed/default_search.yaml). Both are tested on the same test
pairs with the same beam (the search's `job.test_limit` and `job.test_beam`), on the embedded
corpus, cleaned once. Goal (issue 17): the search's best trial beats the default job's test BLEU.
Runs in its own MLflow store; the cleaned corpus and tokenizer of the workspace are reused.

The default search bounds its trials by training steps (800), so that two runs of one configuration
do the same work whatever the machine's load; the anchor gets the same bound. `--max-steps N` changes
it (a search bounded by minutes gets twice its minutes as a cap, which keeps `preset: auto`'s
choice). `--fifo` first runs the same configurations (same seed) to the
end without early stopping, and prints ASHA's compute and best dev BLEU against that exhaustive search
(goal, issue 17: within 0.5 dev BLEU for at most 50 % of its trial-minutes).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import platform
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-samples", type=int, help="configurations the search samples (default: the default search's)")
    ap.add_argument("--max-steps", type=int, default=0, help="bound the anchor and every trial by steps, not minutes")
    ap.add_argument("--search-space", metavar="YAML", help="replaces the default search's space")
    ap.add_argument("--fifo", action="store_true", help="also run the same configurations without early stopping")
    ap.add_argument("--scheduler", choices=("asha", "halving"), help="the search's early stopping (default: the default search's)")
    ap.add_argument("--skip-anchor", action="store_true", help="only the searches (with --fifo: the compute goal alone)")
    ap.add_argument("--asha-metric", choices=("dev/bleu", "dev/loss"), help="what ASHA's rungs compare")
    ap.add_argument("--grace-period", type=int, help="ASHA: steps before the first cut")
    ap.add_argument("--reduction-factor", type=int, help="ASHA: keep the top 1/rf at each rung")
    ap.add_argument("--seed", type=int, help="the search's sampling seed: other configurations (default: the default search's)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="an override of the search's base job and of the anchor, e.g. train.bf16=true (repeatable)")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="tune_vs_default-"))
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{work / 'mlflow.db'}"

    from mtcore.console import configure
    from mtcore.distributed.cluster import init_ray
    from mtcore.distributed.jobs import DEFAULT_JOB, TrainingJob
    from mtcore.distributed.ray_training import run_training
    from mtcore.distributed.tune import DEFAULT_SEARCH, TuneJob, format_table, run_search
    from mtcore.distributed.tune.driver import describe_scheduler
    from tune_efficiency import compare

    configure()
    init_ray()
    tj = TuneJob.load(DEFAULT_SEARCH, args.overrides, space_file=args.search_space, num_samples=args.num_samples)
    if args.seed is not None:
        tj = tj.with_overrides(seed=args.seed)
    if args.scheduler:
        tj = tj.with_overrides(scheduler=args.scheduler)
    budget, steps = tj.base.run.train.time_budget_min, tj.base.run.train.max_steps
    if args.max_steps:
        budget, steps = (budget if steps else 2 * budget), args.max_steps  # a minutes-bound search: its minutes as a cap, twice
        tj = tj.with_overrides([f"train.max_steps={steps}", f"train.time_budget_min={budget:g}"])
    bound = [f"train.time_budget_min={budget:g}"] + ([f"train.max_steps={steps}"] if steps else [])
    asha = {k: v for k, v in (("metric", args.asha_metric), ("grace_period", args.grace_period),
                              ("reduction_factor", args.reduction_factor)) if v is not None}
    if asha:
        tj = tj.with_overrides(asha=dataclasses.replace(tj.search.asha, **asha))
    trial = tj.base
    same_test = [f"job.test_limit={trial.job.test_limit}", f"job.test_beam={trial.job.test_beam}",
                 f"train.bf16={str(trial.run.train.bf16).lower()}"]  # the search's precision (fp32 by default), so the same model
    default = TrainingJob.load(DEFAULT_JOB, [*bound, *same_test, *args.overrides,
                                             f"job.run_name=bench-default-{time.strftime('%Y%m%d-%H%M%S')}"])  # fresh, not resumed
    if args.skip_anchor:  # what the anchor's run would have made first, so that neither search's minutes include it
        from mtcore.distributed import ray_training

        train_data = ray_training.resolve_train_data(tj.base)
        ray_training.encoded_training_pairs(train_data, tj.base, ray_training.tokenizer_for(train_data, tj.base))
        anchor = None
    else:
        print(f"anchor: the default job with {' '.join(bound)} ({default.preset_note})", flush=True)
        anchor = run_training(default)
        print(f"anchor: test BLEU {anchor.test['test/bleu']:.2f}, best dev BLEU {anchor.best_dev_bleu:.2f}, "
              f"{anchor.steps} steps", flush=True)

    per_trial = f"{steps} steps" if steps else f"{budget:g} min"
    fifo = None
    if args.fifo:
        print(f"exhaustive: the same {tj.search.trials} configurations of {per_trial}, no early stopping", flush=True)
        fifo = run_search(tj.with_overrides(scheduler="fifo"), overwrite=True)  # verbose=1: a line per trial start, validation and end
        print(format_table(fifo.rows, tj.search.space), flush=True)
    print(f"figure: the search ({describe_scheduler(tj)}), {tj.search.trials} trials "
          f"of {per_trial}", flush=True)
    search = run_search(tj, overwrite=True)  # verbose=1: a line per trial start, validation and end
    print(format_table(search.rows, tj.search.space), flush=True)
    if fifo is not None:
        print()
        compare({"FIFO": fifo, tj.search.scheduler.upper(): search}, goal_share=0.5)
        if fifo.best:
            print(f"FIFO's best trial (by dev BLEU): test BLEU {fifo.best.test_bleu:.2f}", flush=True)
    machine = (f"machine: {platform.node()} {os.cpu_count()} CPUs, {search.plan.describe()}; load average "
               f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; {datetime.date.today().isoformat()}")
    if anchor is None:
        print(machine)
        return 0
    best_test = search.test.get("test/bleu", float("nan"))
    best_dev = search.best.best_dev_bleu if search.best else float("nan")

    ratio = lambda a, b: f"{a / b:.2f}" if b else "-"  # noqa: E731
    print(f"\n{'':26}{'default job':>14}{'search best':>14}{'search/default':>16}")
    print(f"{'test BLEU':26}{anchor.test['test/bleu']:>14.2f}{best_test:>14.2f}{ratio(best_test, anchor.test['test/bleu']):>16}")
    print(f"{'best dev BLEU':26}{anchor.best_dev_bleu:>14.2f}{best_dev:>14.2f}{ratio(best_dev, anchor.best_dev_bleu):>16}")
    print(f"{'minutes (wall)':26}{anchor.elapsed_s / 60:>14.1f}{search.elapsed_s / 60:>14.1f}"
          f"{ratio(search.elapsed_s, anchor.elapsed_s):>16}")
    print(f"test BLEU gain of the search: {best_test - anchor.test['test/bleu']:+.2f} "
          f"({trial.job.test_limit or 'all'} test pairs, beam {trial.job.test_beam}); goal > 0: "
          f"{'met' if best_test > anchor.test['test/bleu'] else 'missed'}")
    print(machine)
    return 0


if __name__ == "__main__":
    sys.exit(main())
