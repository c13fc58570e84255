"""Does the default search find a better model than the default job, at the same per-trial budget?

    python benchmarks/tune_vs_default.py                  # the default search vs the default job, 3 minutes each
    python benchmarks/tune_vs_default.py --num-samples 8

Anchor: `experiments/train_transformer.py` (the default job, `preset: auto`) given the search's
per-trial training budget. Figure: the best trial of `experiments/tune_transformer.py` (the
default search, mtcore/distributed/default_search.yaml). Both are tested on the same test
pairs with the same beam (the search's `job.test_limit` and `job.test_beam`), on the embedded
corpus, cleaned once. Goal (issue 17): the search's best trial beats the default job's test BLEU.
Runs in its own MLflow store; the cleaned corpus and tokenizer of the workspace are reused.
"""

from __future__ import annotations

import argparse
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
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="tune_vs_default-"))
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{work / 'mlflow.db'}"

    from mtcore.console import configure
    from mtcore.distributed.cluster import init_ray
    from mtcore.distributed.jobs import DEFAULT_JOB, TrainingJob
    from mtcore.distributed.ray_training import run_training
    from mtcore.distributed.tune import DEFAULT_SEARCH, TuneJob, format_table, run_search

    configure()
    init_ray()
    tj = TuneJob.load(DEFAULT_SEARCH, [], num_samples=args.num_samples)
    trial = tj.base
    budget = trial.run.train.time_budget_min
    same_test = [f"job.test_limit={trial.job.test_limit}", f"job.test_beam={trial.job.test_beam}"]
    default = TrainingJob.load(DEFAULT_JOB, [f"train.time_budget_min={budget}", *same_test,
                                                 f"job.run_name=bench-default-{time.strftime('%Y%m%d-%H%M%S')}"])  # fresh, not resumed
    print(f"anchor: the default job with train.time_budget_min={budget} ({default.preset_note})", flush=True)
    anchor = run_training(default)
    print(f"anchor: test BLEU {anchor.test['test/bleu']:.2f}, best dev BLEU {anchor.best_dev_bleu:.2f}, "
          f"{anchor.steps} steps", flush=True)

    print(f"figure: the default search, {tj.search.trials} trials of {budget} min", flush=True)
    search = run_search(tj, overwrite=True, verbose=0)
    print(format_table(search.rows, tj.search.space), flush=True)
    best_test = search.test.get("test/bleu", float("nan"))
    best_dev = search.best.best_dev_bleu if search.best else float("nan")

    print(f"\n{'':26}{'default job':>14}{'search best':>14}{'search/default':>16}")
    print(f"{'test BLEU':26}{anchor.test['test/bleu']:>14.2f}{best_test:>14.2f}{best_test / anchor.test['test/bleu']:>16.2f}")
    print(f"{'best dev BLEU':26}{anchor.best_dev_bleu:>14.2f}{best_dev:>14.2f}{best_dev / anchor.best_dev_bleu:>16.2f}")
    print(f"{'minutes (wall)':26}{anchor.elapsed_s / 60:>14.1f}{search.elapsed_s / 60:>14.1f}"
          f"{search.elapsed_s / anchor.elapsed_s:>16.2f}")
    print(f"test BLEU gain of the search: {best_test - anchor.test['test/bleu']:+.2f} "
          f"({trial.job.test_limit or 'all'} test pairs, beam {trial.job.test_beam}); goal > 0: "
          f"{'met' if best_test > anchor.test['test/bleu'] else 'missed'}")
    print(f"machine: {platform.node()} {os.cpu_count()} CPUs, {search.plan.describe()}; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; {datetime.date.today().isoformat()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
