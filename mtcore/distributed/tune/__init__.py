"""Ray Tune search over model hyperparameters (and the architecture); every trial is a Ray Train DDP run.

Modules, lowest first (as in Ray's Train V2 + Tune examples):
- `space` (`Param`, `SearchConfig`, `TuneJob`): a `search:` section next to the
  job/model/train base of a job file; each key is a `model.*` or `train.*` field and
  each sampled value becomes an override of the base `TrainingJob`. Every value of
  every choice and both ends of every range are checked against `ModelConfig` /
  `TrainConfig` (alone and in combination) before any trial starts. `model.arch` may be
  searched (`{choice: [transformer, rnn]}`), so that one MLflow comparison shows both
  architectures; every other key is checked against each architecture in the space;
- `resources`: trials × workers that fit the cluster, and the CPUs of stopped trials given back;
- `trial`: a Tune *driver function* that builds the trial's job and calls
  `mtcore.distributed.ray_training.run_training` (in a task outside the trial's CPU-less placement
  group), whose Train workers report dev BLEU at each validation; `ValidationReportCallback`
  forwards those reports to the trial, so ASHA compares trials at the same training step;
- `halving`: synchronous successive halving (`search.scheduler: halving`), the pausing
  alternative to Ray's `ASHAScheduler`, which only stops: every trial waits at a rung until
  all have reached it, then the best 1/rf resume from their rung checkpoint;
- `driver` (`run_search`): plans resources, opens the parent MLflow run, runs (or
  restores) the `Tuner`;
- `results`: closes the books (early-stopped children, the best trial's test BLEU, the
  model registry) and makes the table of trials.

Resources. A trial's driver function only waits on its Train run, so it asks for no
CPU; each Train worker takes one CPU (and one GPU on a GPU cluster). Trials run
concurrently only while `concurrent trials × workers per trial ≤ CPUs` (and ≤ GPUs):
asking for more is an error that names the numbers, because Train runs that cannot
get all their workers wait forever. On a 2-CPU machine the default is **one trial at
a time × 2 DDP workers**, rather than 2 trials × 1 worker:
- each trial is then the run it stands for (DDP, as on a cluster), and per-trial time
  budgets (`train.time_budget_min`) mean the same for every trial instead of depending
  on what shares the cores;
- ASHA is asynchronous: sequential trials let each new trial be compared at every rung
  against the complete history of the previous ones, so it prunes with the most
  information (2 concurrent trials would often pass rungs before anything is recorded);
- one model in memory at a time on a machine shared with others.
`--workers-per-trial 1` gives 2 trials × 1 worker (more throughput for tiny models,
where gloo all-reduce dominates). A trial that ASHA stops is killed within seconds
(`STOPPED_TRIAL_KILL_S`), so that its workers' CPUs go to the next trial. On GPUs the default is one GPU worker per trial and
as many concurrent trials as GPUs (and CPUs) allow.

MLflow: the search is a parent run (experiment `tune_transformer`, named after what
is searched) and each trial a child run in the same experiment (params, curves,
dev/test BLEU); trials stopped by ASHA end KILLED with the tag
`mtcore.tune.stopped_early=true`, crashed trials end FAILED. The best trial's
checkpoint is logged as a pyfunc `translator` model in its child run and registered
(`mtcore-en-vi-transformer` by default).

Resume: search and trial names are derived from the settings (never timestamps), so
`run_search(..., resume=True)` finds the Tune experiment, its parent run and each
trial's Train run and MLflow run again: finished trials are not rerun, interrupted
ones continue from their last checkpoint.
"""

from mtcore.distributed.tune.driver import plan_search, run_search
from mtcore.distributed.tune.resources import ResourcePlan, plan_resources
from mtcore.distributed.tune.results import SearchOutcome, TrialRow, format_table, registered_name
from mtcore.distributed.tune.space import (DEFAULT_SEARCH, METRIC, SCHEDULERS, SEARCHERS, Param, SearchConfig, TuneError,
                                           TuneJob, apply_overrides, base_point)

__all__ = [
    "DEFAULT_SEARCH", "METRIC", "SCHEDULERS", "SEARCHERS", "Param", "ResourcePlan", "SearchConfig", "SearchOutcome",
    "TrialRow", "TuneError", "TuneJob", "apply_overrides", "base_point", "format_table", "plan_resources",
    "plan_search", "registered_name", "run_search",
]
