"""One Tune trial: a driver function that builds the trial's job and runs it on Ray Train as a child
MLflow run of the search; its Train workers report dev BLEU at each validation, and
`ValidationReportCallback` forwards those reports to the trial, so ASHA compares trials at the same
training step.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from mtcore.distributed import ray_training
from mtcore.distributed.jobs import TrainingJob
from mtcore.distributed.tune.resources import WORKER_GROUP_START_TIMEOUT_S
from mtcore.distributed.tune.space import METRIC, TIME_ATTR, TuneError, apply_overrides, flat_trial_values

log = logging.getLogger(__name__)


def validation_callback():
    """Ray's TuneReportCallback, forwarding only validation reports (they carry dev BLEU).

    Step reports (train/loss every log interval) would reach ASHA without its metric and
    trip Tune's strict metric check."""
    from ray.tune.integration.ray_train import TuneReportCallback

    class ValidationReportCallback(TuneReportCallback):
        def after_report(self, run_context, metrics, checkpoint):
            if metrics and METRIC in metrics[0]:
                super().after_report(run_context, metrics, checkpoint)

    return ValidationReportCallback()


def trial_job(base: TrainingJob, values: dict[str, Any], trial_id: str, plan: dict[str, Any]) -> TrainingJob:
    """The trial's job: base + sampled values, named by trial id and logged in the search's experiment."""
    job = apply_overrides(base, values)
    return apply_overrides(job, {
        "job.run_name": f"{trial_id}-{job.run_name()}", "job.workers": plan["workers"],
        "job.use_gpu": "yes" if plan["use_gpu"] else "no",
        "job.log_model": False,  # only the best trial's model is logged (and registered), after the search
    })


def _trial(config: dict[str, Any], *, base: dict[str, Any], ctx: dict[str, Any]) -> None:
    """A Tune trial: one Ray Train DDP run of the base job with this trial's values, as a child MLflow run."""
    import ray
    from ray import tune

    trial_id = tune.get_context().get_trial_id()
    job = trial_job(TrainingJob.from_dict(base), flat_trial_values(config), trial_id, ctx)
    _use_driver_settings(ctx)
    run = ray_training.open_mlflow_run(job, job.run_name(), job.job.train_data, ctx["parent_run_id"],
                                       lineage=ctx.get("lineage"))
    run.set_tags({"mtcore.tune.trial_id": trial_id, "mtcore.tune.search": ctx["search_name"]})
    # Tune runs this function inside the trial's placement group, which holds no CPU, and Ray would
    # schedule every task started from here into it (the end-of-run test decoding needs a CPU). The
    # Train driver therefore runs as a task outside that group; it dies with the trial if Tune stops it.
    drive = ray.remote(num_cpus=0, max_retries=0)(_drive_training).options(scheduling_strategy="DEFAULT")
    try:
        outcome = ray.get(drive.remote(job.to_dict(), ctx, [validation_callback()]))
    except Exception as err:
        cause = getattr(err, "cause", None) or err
        run.set_tags({"mtcore.tune.error": str(cause)[:4000]})
        run.end("FAILED")
        raise TuneError(f"trial {trial_id} failed: {cause}") from None
    run.set_tags({"mtcore.tune.stopped_early": "false"})
    last_loss = run.metrics().get("dev/loss", float("nan"))  # every result carries the rung metric
    tune.report({
        METRIC: outcome.best_dev_bleu, TIME_ATTR: outcome.steps, "dev/loss": last_loss,
        "final/test_bleu": outcome.test["test/bleu"], "final/test_chrf": outcome.test["test/chrf"],
        "final/test_bleu_signature": outcome.test["test/bleu_signature"],
        "final/best_checkpoint": str(outcome.best_checkpoint), "final/mlflow_run_id": run.run_id,
        "final/train_s": outcome.elapsed_s,
    })


def _use_driver_settings(ctx: dict[str, Any]) -> None:
    """Trials run in other processes: use the search driver's MLflow store and work directory."""
    os.environ["MLFLOW_TRACKING_URI"] = ctx["tracking_uri"]
    os.environ["MTCORE_HOME"] = ctx["runs_dir"]
    # The workers of a trial ASHA has just stopped are released asynchronously (`release_callback`
    # removes their placement group seconds after its controller is gone, UNUSED_GROUP_S at worst),
    # which can be longer than Train's default 60 s wait for a worker group. The next trial waits instead of failing.
    os.environ.setdefault("RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S", str(WORKER_GROUP_START_TIMEOUT_S))


def _drive_training(job: dict[str, Any], ctx: dict[str, Any], callbacks: list):
    _use_driver_settings(ctx)
    return ray_training.run_training(TrainingJob.from_dict(job), parent_run_id=ctx["parent_run_id"], callbacks=callbacks)
