"""`run_search`: plan resources, open the parent MLflow run, run (or restore) the `Tuner`, then hand
the trials to `results`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import shutil
import time
from pathlib import Path

from mtcore.distributed import ray_training
from mtcore.runs import home
from mtcore.distributed.tune.resources import (STOPPED_TRIAL_KILL_S, TRIAL_DRIVER_RESOURCES, ResourcePlan, plan_resources,
                                              release_after_search, release_callback)
from mtcore.distributed.tune.halving import halving_generator, halving_rungs, sync_halving
from mtcore.distributed.tune.progress import progress_callback, quiet_tune_output
from mtcore.distributed.tune.results import SearchOutcome, close_children, finish_search, trial_rows, trial_states
from mtcore.distributed.tune.space import METRIC, RUNG_METRICS, TIME_ATTR, TuneError, TuneJob, base_point, param_space
from mtcore.distributed.tune.trial import _trial

log = logging.getLogger(__name__)


def _open_parent_run(tj: TuneJob, name: str, plan: ResourcePlan, train_data: str, resume: bool,
                     lineage: dict[str, str]):
    """The search's own MLflow run (a `TrackedRun`); its trials are its children. `resume` continues it.
    `lineage`: the data job's tags (`--data runs/backtranslate`), as a training run carries them."""
    from mtcore import tracking
    from mtcore.tracking.run import open_run

    tags = tracking.standard_tags("experiments/tune_transformer.py", train_data) | {
        # mtcore.tune.search is the search's name on the parent and on every trial: one filter finds them all
        "mtcore.tune.scheduler": tj.search.scheduler, "mtcore.tune.searcher": tj.search.search, "mtcore.tune.search": name,
        "mtcore.tune.resources": plan.describe(),
    } | lineage
    params = tracking.flatten(tj.base.to_dict(), "base.")
    params |= {f"space.{p.key}": p.describe() for p in tj.search.space}
    params |= tracking.flatten({k: v for k, v in tj.search.to_dict().items() if k != "space"}, "search.")
    params |= {"search.workers_per_trial_resolved": str(plan.workers_per_trial),
               "search.concurrent_trials_resolved": str(plan.concurrent_trials)}
    return open_run(tj.search.experiment, name, tags=tags, params=params, continue_named=resume)


def _scheduler(tj: TuneJob, concurrent: int):
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

    if tj.search.scheduler == "fifo":
        return FIFOScheduler()  # the best trial is picked by dev BLEU afterwards, whatever the scheduler
    a = tj.search.asha
    grace, max_t = _asha_bounds(tj)
    if tj.search.scheduler == "halving":
        return sync_halving(time_attr=TIME_ATTR, metric=a.metric, mode=RUNG_METRICS[a.metric],
                            rungs=halving_rungs(grace, a.reduction_factor, max_t, tj.base.run.train.validate_every),
                            reduction_factor=a.reduction_factor,
                            expected=tj.search.trials, max_running=concurrent)
    # stop_last_trials=False: a trial that reaches max_t ends by itself (test BLEU, artifacts), not killed.
    return ASHAScheduler(time_attr=TIME_ATTR, metric=a.metric, mode=RUNG_METRICS[a.metric], grace_period=grace,
                         reduction_factor=a.reduction_factor, max_t=max_t, stop_last_trials=False)


def _asha_bounds(tj: TuneJob) -> tuple[int, int]:
    """(grace period, max_t) in steps. Rungs stay below the last step (a trial that trained to its end is not stopped
    before its test evaluation); runs bounded by a time budget have no step limit of ASHA's own."""
    t, a = tj.base.run.train, tj.search.asha
    grace = a.grace_period or t.validate_every or 1
    return grace, max(a.max_t or (t.max_steps - 1 if t.max_steps else 10**9), grace)


def describe_scheduler(tj: TuneJob) -> str:
    """What `--dry-run` says of the scheduler: for ASHA, the metric and the rungs (steps at which trials are cut)."""
    if tj.search.scheduler == "fifo":
        return "fifo: every trial runs to its end"
    t, a = tj.base.run.train, tj.search.asha
    grace, max_t = _asha_bounds(tj)
    rungs, r = [], grace
    while r < max_t and len(rungs) < 8:
        rungs.append(r)
        r *= a.reduction_factor
    at = ", ".join(f"{x:,}" for x in rungs) + (" …" if r < max_t and len(rungs) == 8 else "")
    # Trials report at validations only: a rung between two is judged on the next one's figures (the last
    # step always validates); with validate_every 0 they validate at the end of each epoch.
    v, when = t.validate_every, "; judged at the validation that ends each epoch"
    if v:
        judged = [min(-(-x // v) * v, t.max_steps or 10**18) for x in rungs]
        when = f"; judged at the validations of steps {', '.join(f'{x:,}' for x in judged)}" if judged != rungs else ""
    rule = ("halving" if tj.search.scheduler == "halving" else "asha") + f" on {a.metric}: "
    rule += ("every trial waits at each rung until all have reached it, then the best 1/"
             if tj.search.scheduler == "halving" else "keeps the best 1/")
    return (f"{rule}{a.reduction_factor} at steps {at}"
            + (f" (of {t.max_steps:,}{when})" if t.max_steps else f" (runs end on their time budget{when})"))


def _searcher(tj: TuneJob, concurrent: int, scheduler=None):
    from ray.tune.search import BasicVariantGenerator

    points = [base_point(tj)] if tj.search.start_from_base else None
    if tj.search.search == "random" and scheduler is not None and tj.search.scheduler == "halving":
        # a paused trial would count against max_concurrent: the scheduler's free slots limit the trials instead
        return halving_generator(scheduler, random_state=tj.search.seed, points_to_evaluate=points)
    if tj.search.scheduler == "halving":
        raise TuneError("the halving scheduler needs its own trial generator (run_search builds both)")
    if tj.search.search == "random":  # Tune ignores max_concurrent_trials for a generator: it limits itself
        return BasicVariantGenerator(random_state=tj.search.seed, max_concurrent=concurrent, points_to_evaluate=points)
    check_searcher(tj)
    from ray.tune.search.optuna import OptunaSearch

    # Optuna's study holds the space flattened, "model/heads": a nested first point failed its size check
    flat = [{f"{section}/{key}": value for section, values in p.items() for key, value in values.items()} for p in points or ()]
    return OptunaSearch(metric=METRIC, mode="max", seed=tj.search.seed, points_to_evaluate=flat or None)


def check_searcher(tj: TuneJob) -> None:
    """The searcher and scheduler can be built here: said by --dry-run, and before a search writes anything or opens
    a run."""
    if tj.search.scheduler == "halving" and tj.search.search != "random":  # its trials wait paused at a rung, which
        # a searcher's concurrency limit counts as running: no trial after the first would ever start
        raise TuneError(f"--scheduler halving works with --search random, not {tj.search.search}; use --scheduler asha")
    if tj.search.search == "optuna" and importlib.util.find_spec("optuna") is None:
        raise TuneError("--search optuna needs the optional dependency optuna: pip install 'mtcore[optuna]' "
                        "(or use --search random)")
    if tj.search.search == "optuna" and tj.search.start_from_base:  # Optuna's study rejects a first point off its space
        point = base_point(tj)
        for p in tj.search.space:
            section, name = p.key.split(".", 1)
            value = point[section][name]
            inside = value in p.values if p.kind == "choice" else p.values[0] <= value <= p.values[1]
            if not inside:
                raise TuneError(f"search.start_from_base: the base job's {p.key}={value!r} is outside the search space's "
                                f"{p.describe()}, and Optuna can only start from a point of its space; add it to the "
                                "space, or pass search.start_from_base=false (random search starts from it anyway)")
    t, grace = tj.base.run.train, _asha_bounds(tj)[0]
    if tj.search.scheduler in ("asha", "halving") and t.max_steps and grace >= t.max_steps:
        raise TuneError(f"ASHA's first rung (search.asha.grace_period, or train.validate_every: step {grace:,}) is not "
                        f"before train.max_steps ({t.max_steps:,}): it would stop no trial; lower the grace period, or "
                        "use --scheduler fifo")


def plan_search(tj: TuneJob) -> ResourcePlan:
    """The search's resources on the cluster at hand (starting or joining Ray): what `--dry-run` prints."""
    from mtcore.distributed.cluster import available_cpus, available_gpus, init_ray

    check_searcher(tj)
    init_ray()
    return plan_resources(tj.search, available_cpus(), available_gpus())


def run_search(tj: TuneJob, *, resume: bool = False, overwrite: bool = False, tune_callbacks: list | None = None,
               verbose: int = 1) -> SearchOutcome:
    """Run (or with `resume`, continue) the search; returns the table of trials and the best trial's test result.

    `tune_callbacks` are Ray Tune callbacks of the Tuner (e.g. to interrupt a search in tests).
    `verbose`: 0 prints nothing, 1 a line per trial start, validation and end (`progress.py`),
    2 also Ray Tune's own reporter."""
    from ray import tune

    from mtcore.distributed.cluster import available_cpus, available_gpus, init_ray

    t0 = time.perf_counter()
    check_searcher(tj)
    init_ray()
    plan = plan_resources(tj.search, available_cpus(), available_gpus())
    from mtcore.distributed.ray_training import resolve_train_data
    from mtcore.tracking import data_version

    version = data_version(resolve_train_data(tj.base))
    name = tj.search_name(version, plan)
    storage = home() / "ray_tune"
    path = storage / name
    marker = storage / f"{name}.mtcore.json"  # beside Tune's folder: the settings and how the search ended
    exists = (path / "tuner.pkl").is_file()
    if resume and not exists:
        raise TuneError(f"--resume: no search '{name}' in {storage} to continue (start it without --resume)")
    if exists and not resume:
        if not overwrite:
            raise TuneError(f"search '{name}' already exists in {path}: pass --resume to continue it, "
                            f"or --overwrite to start it again")
        shutil.rmtree(path)
    if resume:
        _check_resumable(marker, name, tj.settings_digest(version, plan))
    storage.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps({"settings": tj.settings_digest(version, plan), "ended": None}))
    if verbose >= 1:
        from mtcore.console import progress_line

        progress_line(f"{'resuming' if resume else 'starting'} search {name}: {tj.search.trials} trials, {plan.describe()}")

    # Once, before any trial: the cleaned corpus and the tokenizer that every trial shares.
    lineage = ray_training.data_lineage_tags(tj.base.job.train_data) if tj.base.job.train_data else {}
    train_data = ray_training.resolve_train_data(tj.base)
    spm = ray_training.tokenizer_for(train_data, tj.base)
    ray_training.encoded_training_pairs(train_data, tj.base, spm)  # here, or every concurrent trial encoded it too
    base = tj.base.with_overrides([f"job.train_data={train_data}", f"job.experiment={tj.search.experiment}"])
    parent = _open_parent_run(tj, name, plan, train_data, resume, lineage)
    try:
        ctx = {
            "tracking_uri": parent.uri, "runs_dir": str(home()), "parent_run_id": parent.run_id,
            "search_name": name, "workers": plan.workers_per_trial, "use_gpu": plan.use_gpu, "lineage": lineage,
        }
        # The trial only drives its Train run: no CPU of its own, or 2 workers could never start on 2 CPUs.
        # (Tune refuses an all-zero request; a little memory is what the driver does use.)
        trainable = tune.with_resources(tune.with_parameters(_trial, base=base.to_dict(), ctx=ctx), TRIAL_DRIVER_RESOURCES)
        # Tune stops a trial (ASHA, Ctrl-C) by asking its function to return and kills it only after
        # TUNE_FORCE_TRIAL_CLEANUP_S (600 s by default). A trial blocked in its Train run never returns by
        # itself, so its workers would keep their CPUs for 10 minutes while the next trial waits: kill it soon.
        os.environ.setdefault("TUNE_FORCE_TRIAL_CLEANUP_S", str(STOPPED_TRIAL_KILL_S))
        progress = [progress_callback(tj.search.space, _expected_trials(tj))] if verbose >= 1 else []
        scheduler = _scheduler(tj, plan.concurrent_trials)
        if resume:
            tuner = tune.Tuner.restore(str(path), trainable=trainable)
        else:
            tuner = tune.Tuner(
                trainable,
                param_space=param_space(tj.search.space),
                tune_config=tune.TuneConfig(
                    num_samples=tj.search.num_samples, scheduler=scheduler,  # metric: set on each of them
                    search_alg=_searcher(tj, plan.concurrent_trials, scheduler),
                    max_concurrent_trials=plan.concurrent_trials if tj.search.search != "random" else None,
                    time_budget_s=tj.search.time_budget_min * 60 or None,
                ),
                run_config=tune.RunConfig(name=name, storage_path=str(storage), verbose=max(0, verbose - 1),
                                         callbacks=[release_callback(), *progress, *(tune_callbacks or [])]),
            )
        fit_start = time.perf_counter()
        with quiet_tune_output() if verbose < 2 else contextlib.nullcontext():
            grid = tuner.fit()
        release_after_search()
        budget = tj.search.time_budget_min * 60
        budget_hit = bool(budget) and time.perf_counter() - fit_start >= budget - 5
        states = trial_states(path)
        rows = trial_rows(grid, states)
        unfinished = _unfinished_ids(states)
        for r in rows:
            if r.trial_id in unfinished:  # never started, or running when the search ended
                r.status = ("STOPPED" if r.steps else "NOT RUN") if budget_hit else "UNFINISHED"
        outcome = SearchOutcome(name, path, parent.run_id, plan, rows, budget_hit=budget_hit)
        marker.write_text(json.dumps({"settings": tj.settings_digest(version, plan), "ended": "budget" if budget_hit else "fit"}))
        close_children(parent, rows)
        if not budget_hit and (unfinished or len(rows) < _expected_trials(tj)):
            outcome.interrupted = True  # Ctrl-C (or a callback) ended the search: --resume continues it
            parent.end("KILLED")
        else:
            finish_search(tj, base, outcome, parent, ctx)
    except BaseException as err:  # the parent run must not stay RUNNING in MLflow whatever stopped the search
        parent.end("KILLED" if isinstance(err, KeyboardInterrupt) else "FAILED")
        raise
    outcome.elapsed_s = time.perf_counter() - t0
    return outcome


def _check_resumable(marker: Path, name: str, digest: str) -> None:
    """`--resume` continues the same search, or refuses: Tune restores its own copy of the settings (a new space,
    sample count or time budget would be ignored), and a search whose time budget is spent runs nothing more."""
    if not marker.is_file():
        return  # made before these markers: nothing to compare
    state = json.loads(marker.read_text())
    if state.get("settings") != digest:
        raise TuneError(f"--resume: search '{name}' was started with other settings (space, sample count, time budget "
                        f"or base job); resume it with those, or pass --overwrite to start it again with these")
    if state.get("ended") == "budget":
        raise TuneError(f"--resume: search '{name}' ended on its time budget, and Tune cannot continue a search whose "
                        f"budget is spent; its trials are in MLflow; --overwrite starts it again")


def _expected_trials(tj: TuneJob) -> int:
    return tj.search.trials


def _unfinished_ids(states: dict[str, tuple[str, str]]) -> set[str]:
    return {trial_id for trial_id, status in states.values() if status not in ("TERMINATED", "ERROR")}
