"""After the search: the table of trials (from the experiment state Tune saved, through the public
`ExperimentAnalysis`), early-stopped children closed, the best trial's test BLEU, its model logged and
registered, the parent run closed.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mtcore.distributed import ray_training
from mtcore.distributed.jobs import TrainingJob
from mtcore.distributed.tune.progress import error_line
from mtcore.distributed.tune.resources import ResourcePlan
from mtcore.distributed.tune.space import METRIC, TIME_ATTR, Param, TuneJob, flat_trial_values
from mtcore.distributed.tune.trial import trial_job

log = logging.getLogger(__name__)


@dataclass
class TrialRow:
    trial_id: str
    values: dict[str, Any]
    status: str  # COMPLETED | STOPPED (early: ASHA or the search budget) | FAILED | UNFINISHED | NOT RUN
    steps: int
    best_dev_bleu: float
    test_bleu: float | None
    minutes: float  # time the trial held its workers (its results' time_this_iter_s, over every restart)
    checkpoint: str | None  # best checkpoint (by dev BLEU) the trial left
    mlflow_run_id: str | None
    error: str = ""
    test: dict[str, Any] = field(default_factory=dict)  # test/bleu, test/chrf and signatures of a completed trial
    best_dev_loss: float = float("nan")  # breaks ties of dev BLEU (early on, every trial's BLEU can be 0)

    @property
    def stopped_early(self) -> bool:
        return self.status == "STOPPED"


@dataclass
class SearchOutcome:
    name: str
    path: Path
    parent_run_id: str
    plan: ResourcePlan
    rows: list[TrialRow]
    best: TrialRow | None = None
    test: dict[str, Any] = field(default_factory=dict)
    registered: str = ""  # "name/version" in the MLflow model registry
    interrupted: bool = False
    elapsed_s: float = 0.0
    budget_hit: bool = False  # the search's time budget ended it

    @property
    def trial_minutes(self) -> float:
        return sum(r.minutes for r in self.rows)


def trial_states(experiment_path: str | Path) -> dict[str, tuple[str, str]]:
    """Trial path → (trial id, status: TERMINATED, ERROR, RUNNING, PENDING, …), read back from the
    experiment state Tune saved; `ResultGrid` exposes neither."""
    from ray.tune import ExperimentAnalysis

    return {t.path: (t.trial_id, t.status) for t in ExperimentAnalysis(str(experiment_path)).trials}


def trial_rows(grid, states: dict[str, tuple[str, str]]) -> list[TrialRow]:
    ids = {path: trial_id for path, (trial_id, _) in states.items()}
    rows = []
    for result in grid:
        df = result.metrics_dataframe
        last = result.metrics or {}
        trial_id = ids.get(result.path) or last.get("trial_id", "?")
        values = flat_trial_values(result.config or {})
        steps, best, ckpt, minutes, dev_loss = 0, float("nan"), None, 0.0, float("nan")
        if df is not None and len(df) and METRIC in df:
            scored = df[df[METRIC].notna()]
            if len(scored):
                best = float(scored[METRIC].max())
                # The trial's checkpoint with the highest dev BLEU that Train still keeps (it keeps the best by
                # `train.best_metric` and the latest); among equal scores, the later.
                for _, row in scored.sort_values([METRIC, TIME_ATTR], ascending=False).iterrows():
                    path = row.get("checkpoint_path")
                    if isinstance(path, str) and Path(path).exists():
                        ckpt = path
                        break
            if "dev/loss" in df and df["dev/loss"].notna().any():
                dev_loss = float(df["dev/loss"].min())
            steps = int(df[TIME_ATTR].max()) if TIME_ATTR in df else 0
            # Summed over results, not Tune's time_total_s: that restarts at 0 when a trial restarts (a paused trial
            # of `halving`, or one resumed after Ctrl-C), and would drop the minutes before the restart.
            if "time_this_iter_s" in df:
                minutes = float(df["time_this_iter_s"].sum()) / 60
            elif "time_total_s" in df:
                minutes = float(df["time_total_s"].max()) / 60
        if "final/best_checkpoint" in last:
            ckpt = last["final/best_checkpoint"]
        if result.error is not None:
            status = "FAILED"
        elif "final/test_bleu" in last:
            status = "COMPLETED"
        else:
            status = "STOPPED"
        rows.append(TrialRow(
            trial_id=str(trial_id), values=values, status=status, steps=steps, best_dev_bleu=best,
            test_bleu=last.get("final/test_bleu"), minutes=minutes, checkpoint=ckpt,
            mlflow_run_id=last.get("final/mlflow_run_id"),
            error=error_line(result.error) if result.error is not None else "",
            test={k.replace("final/", "test/").replace("test/test_", "test/"): last[k] for k in
                  ("final/test_bleu", "final/test_chrf", "final/test_bleu_signature") if k in last},
            best_dev_loss=dev_loss,
        ))
    return sorted(rows, key=lambda r: r.trial_id)


def format_table(rows: list[TrialRow], space: tuple[Param, ...]) -> str:
    headers = ["trial"] + [p.short for p in space] + ["steps", "dev BLEU", "test BLEU", "min", "status", "stopped early"]
    lines = []
    for r in rows:
        cells = [r.trial_id.split("_")[-1]]
        for p in space:
            v = r.values.get(p.key, "")
            cells.append(f"{v:.4g}" if isinstance(v, float) else str(v))
        cells += [
            str(r.steps), "-" if math.isnan(r.best_dev_bleu) else f"{r.best_dev_bleu:.2f}",
            "-" if r.test_bleu is None else f"{r.test_bleu:.2f}", f"{r.minutes:.1f}",
            r.status + (f" ({r.error})" if r.error else ""), "yes" if r.stopped_early else "no",
        ]
        lines.append(cells)
    widths = [max(len(h), *(len(c[i]) for c in lines)) if lines else len(h) for i, h in enumerate(headers)]
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(headers), fmt(["-" * w for w in widths])] + [fmt(c) for c in lines])


def registered_name(tj: TuneJob, arch: str | None = None) -> str:
    """`arch`: the best trial's, when the architecture was searched."""
    m = tj.base.run.model
    return tj.search.register_as or f"mtcore-{m.src_lang}-{m.tgt_lang}-{arch or m.arch}"


STOPPED_AT_TAG = "mtcore.tune.stopped_at_step"


def close_children(parent, rows: list[TrialRow]) -> None:
    """Child runs of trials ASHA (or the budget) stopped: their process was killed mid-run, so end them here."""
    children = parent.children("mtcore.tune.trial_id")
    for r in rows:
        run = children.get(r.trial_id)
        if run is None:
            continue
        r.mlflow_run_id = run.run_id
        status = run.status()
        if r.status == "STOPPED" and status in ("RUNNING", "FAILED"):
            # Its Train run goes on until it is killed, seconds later, and may log validations past the stop: the
            # report reads the run up to this step, as the search judged it.
            run.set_tags({"mtcore.tune.stopped_early": "true", STOPPED_AT_TAG: str(r.steps)})
            run.end("KILLED")
        elif r.status == "FAILED" and status != "FAILED":
            run.end("FAILED")
        elif r.status == "UNFINISHED" and status == "RUNNING":  # Ctrl-C: --resume runs it again, as another run
            run.end("KILLED")


def best_key(row: TrialRow, best_metric: str = "bleu") -> tuple:
    """The best trial by what picked each trial's checkpoint (`train.best_metric`): the highest dev BLEU, among equal
    ones (all 0 early in a short search) the lowest dev loss (before, the first trial won every tie and was
    registered); with `loss`, the lowest dev loss (it was ranked by a dev BLEU its loss-chosen checkpoint need not have)."""
    loss = row.best_dev_loss if not math.isnan(row.best_dev_loss) else math.inf
    return (-loss, row.best_dev_bleu) if best_metric == "loss" else (row.best_dev_bleu, -loss)


def finish_search(tj: TuneJob, base: TrainingJob, outcome: SearchOutcome, parent, ctx: dict[str, Any]) -> None:
    """The best trial: its test BLEU (evaluated here if ASHA stopped it), its model registered; the parent closed."""
    from mtcore.distributed.ray_training import finish_run
    from mtcore.tracking.pyfunc import log_translator, register_translator
    from mtcore.tracking.run import TrackedRun

    finished_before = parent.tags().get("mtcore.tune.finished") == "true"
    candidates = [r for r in outcome.rows if r.status in ("COMPLETED", "STOPPED") and r.checkpoint and not math.isnan(r.best_dev_bleu)]
    counts = {s: sum(r.status == s for r in outcome.rows) for s in ("COMPLETED", "STOPPED", "FAILED")}
    parent.log_metrics({"trials/completed": counts["COMPLETED"], "trials/stopped_early": counts["STOPPED"],
                        "trials/failed": counts["FAILED"], "trial_minutes": outcome.trial_minutes})
    _log_table(parent, outcome.rows, tj.search.space)
    if not candidates:
        parent.end("FAILED")
        return
    best = max(candidates, key=lambda row: best_key(row, base.run.train.best_metric))
    outcome.best = best
    best_run = TrackedRun(parent.uri, best.mlflow_run_id)
    if finished_before:  # --resume of a search that had ended: report it, evaluate and register nothing again
        metrics, tags = best_run.metrics(), best_run.tags()
        outcome.test = {"test/bleu": metrics.get("test/bleu", float("nan")),
                        "test/chrf": metrics.get("test/chrf", float("nan")),
                        "test/bleu_signature": tags.get("sacrebleu.bleu_signature", "")}
        outcome.registered = parent.tags().get("mtcore.tune.registered_model", "")
        parent.end("FINISHED")
        return
    job = trial_job(base, best.values, best.trial_id, ctx)
    best_dir = Path(best.checkpoint)
    if best.status == "COMPLETED":
        test = best.test
    else:  # ASHA stopped the best trial: evaluate its best checkpoint now, as a finished trial would have been
        inputs = ray_training.prepare_inputs(job, parent.run_id)
        test = finish_run(job, inputs, best_dir, ctx["use_gpu"])
        inputs.run.set_tags({"mtcore.tune.stopped_early": "true"})
        best.test_bleu = test["test/bleu"]
    outcome.test = test
    info = log_translator(best_dir, run=best_run)
    best_run.set_tags({"mtcore.tune.best": "true"})
    if tj.search.register_as != "-":
        outcome.registered = register_translator(info.model_uri, registered_name(tj, best.values.get("model.arch")), tags={
            "search": outcome.name, "trial_id": best.trial_id, "dev_bleu": f"{best.best_dev_bleu:.2f}",
            "test_bleu": f"{test['test/bleu']:.2f}", "mlflow_run_id": best.mlflow_run_id,
        })
        parent.set_tags({"mtcore.tune.registered_model": outcome.registered})
    parent.log_metrics({"best/dev_bleu": best.best_dev_bleu, "best/test_bleu": test["test/bleu"],
                        "best/test_chrf": test["test/chrf"]})
    parent.set_tags({
        "mtcore.tune.best_trial": best.trial_id, "mtcore.tune.best_run_id": best.mlflow_run_id,
        "mtcore.tune.best_config": json.dumps(best.values), "sacrebleu.bleu_signature": test["test/bleu_signature"],
        "mtcore.tune.finished": "true",
    })
    parent.end("FINISHED")


def _log_table(run, rows: list[TrialRow], space: tuple[Param, ...]) -> None:
    from mtcore.tracking.run import log_files

    records = [{**dataclasses.asdict(r), "stopped_early": r.stopped_early} for r in rows]
    log_files(run, {"trials.txt": format_table(rows, space) + "\n",
                    "trials.json": json.dumps(records, indent=2, default=str)})
