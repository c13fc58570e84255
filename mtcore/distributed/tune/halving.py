"""Synchronous successive halving (`search.scheduler: halving`): every trial trains to the first rung and waits
there; once all have, the best 1/rf go on to the next rung and the others stop.

Why not only Ray's `ASHAScheduler`: it never pauses, it stops a trial that reaches a rung below the best 1/rf of
those recorded there *before* it. With one trial at a time (the 2-CPU plan) the first trials pass every rung
unopposed, so on the default search it kept 58-62 % of the exhaustive search's steps (RESULTS.md, Tune runs
10-11). Waiting at the rung until every trial is there is the synchronous rule of Jamieson & Talwalkar 2016
(successive halving; Li et al. 2020, Algorithm 1, the synchronous baseline of ASHA). Its cost is a restart per
promoted trial: a paused trial's Train run is killed and, when promoted, started again with the same run name,
so Ray Train V2 resumes it from its latest checkpoint (the rung's validation wrote one).

Two pieces, both in the search's driver process:
- `SyncHalving`, a Tune `TrialScheduler`: records each trial's rung metric, pauses it, decides a rung once every
  trial of its cohort has reached it (or ended), then stops the losers and lets the winners run (one at a time
  when the plan says so);
- `HalvingGenerator`, Tune's random `BasicVariantGenerator`, which creates the next trial only while fewer than
  the plan's concurrent trials are running. The stock generator counts a paused trial as running, so it would
  never create the trials a rung waits for; and a trial's driver holds no CPU, so only this limit keeps two Train
  runs from waiting for each other's CPUs.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from mtcore.distributed.tune.resources import CHECK_EVERY_S, STOPPED_TRIAL_KILL_S

log = logging.getLogger(__name__)

# A paused trial's actor is killed STOPPED_TRIAL_KILL_S after the pause, its Train controller with it, and its workers'
# CPUs come back within release_callback's CHECK_EVERY_S: a promoted trial restarts only after that.
RESTART_AFTER_S = STOPPED_TRIAL_KILL_S + CHECK_EVERY_S + 3.0


def halving_rungs(grace: int, reduction_factor: int, max_t: int, validate_every: int = 0) -> list[int]:
    """The steps at which a cohort is halved: grace · rf^k below max_t (the last step is no rung), each moved to the
    validation that judges it (trials report there only): a rung between two validations would otherwise be judged
    at a later one, and one at the last step would pause every trial before its test."""
    rungs, r = [], grace
    while r < max_t:
        judged = -(-r // validate_every) * validate_every if validate_every else r
        if judged < max_t and judged not in rungs:
            rungs.append(judged)
        r *= reduction_factor
    return rungs


def _restart_after() -> float:
    return RESTART_AFTER_S  # read at call time: tests of the rule set it to 0


def promoted_count(cohort: int, reduction_factor: int) -> int:
    """How many of a rung's cohort go on: ⌊n / rf⌋ (Jamieson & Talwalkar), at least one."""
    return max(1, cohort // reduction_factor)


def _make_scheduler_class():
    from ray.tune.experiment import Trial
    from ray.tune.schedulers import FIFOScheduler, TrialScheduler

    class SyncHalving(FIFOScheduler):
        """See the module's docstring. `expected`: the search's trial count (the first rung's cohort)."""

        _supports_buffered_results = False  # each validation is judged as it comes (as Ray's HyperBand)

        def __init__(self, *, time_attr: str, metric: str, mode: str, rungs: list[int], reduction_factor: int,
                     expected: int, max_running: int):
            super().__init__()
            self._time_attr, self._metric, self._sign = time_attr, metric, (1 if mode == "max" else -1)
            self._rungs, self._rf, self._expected, self._max_running = list(rungs), reduction_factor, expected, max_running
            self._trials: list = []
            self._level: dict[str, int] = {}  # trial id -> rungs it may pass
            self._scores: list[dict[str, float]] = [{} for _ in self._rungs]  # per rung: trial id -> metric there
            self._ended: set[str] = set()  # completed, failed or stopped
            self._decided: list[bool] = [False for _ in self._rungs]
            self._paused_since: dict[str, float] = {}  # trial id -> when it was told to wait (monotonic)

        # -- saved with the searcher's state (Tune saves no scheduler), so that --resume knows the rungs' decisions
        def state(self) -> dict[str, Any]:
            return {"level": dict(self._level), "scores": [dict(s) for s in self._scores], "ended": sorted(self._ended),
                    "decided": list(self._decided)}

        def load_state(self, state: dict[str, Any]) -> None:
            if len(state["scores"]) != len(self._rungs):
                return  # other rungs: nothing to carry over (run_search refuses other settings on --resume anyway)
            self._level.update(state["level"])
            self._scores = [dict(s) for s in state["scores"]]
            self._ended |= set(state["ended"])
            self._decided = list(state["decided"])

        # -- what the search's generator asks before it creates a trial
        def may_start_another(self) -> bool:
            return self._active() < self._max_running

        def _active(self) -> int:
            """Trials starting or running (a stopped one may still be ending: its CPUs come back seconds later)."""
            return sum(t.status in (Trial.PENDING, Trial.RUNNING) and t.trial_id not in self._ended for t in self._trials)

        # -- Tune's scheduler interface
        def on_trial_add(self, tune_controller, trial):
            restored = trial.trial_id in self._level  # --resume: the searcher's saved state knew it
            self._trials.append(trial)
            self._level.setdefault(trial.trial_id, 0)
            if trial.status in (Trial.TERMINATED, Trial.ERROR):
                self._ended.add(trial.trial_id)  # restored after it had ended: no rung waits for it
            elif restored and trial.status == Trial.PENDING:
                # Tune restores every unfinished trial as PENDING and would start them all at once (a driver holds no
                # CPU). Paused, they are restarted by `choose_trial_to_run`, one slot at a time, and those waiting at
                # an undecided rung wait on.
                trial.set_status(Trial.PAUSED)

        def on_trial_result(self, tune_controller, trial, result: dict[str, Any]) -> str:
            tid, level = trial.trial_id, self._level.get(trial.trial_id, 0)
            if level >= len(self._rungs) or result.get(self._time_attr, 0) < self._rungs[level]:
                return TrialScheduler.CONTINUE
            value = result.get(self._metric)
            self._scores[level].setdefault(tid, float("nan") if value is None else float(value))
            self._decide(tune_controller, level, current=trial)
            if self._level.get(tid, 0) > level:
                return TrialScheduler.CONTINUE  # promoted by its own result (the cohort's last to arrive)
            if tid in self._ended:
                return TrialScheduler.STOP
            self._paused_since[tid] = time.monotonic()
            return TrialScheduler.PAUSE

        def on_trial_complete(self, tune_controller, trial, result):
            self._end(tune_controller, trial)

        def on_trial_error(self, tune_controller, trial):
            self._end(tune_controller, trial)

        def on_trial_remove(self, tune_controller, trial):
            self._end(tune_controller, trial)

        def choose_trial_to_run(self, tune_controller):
            for t in self._trials:  # new trials first: a rung is decided once its whole cohort has reached it
                if t.status == Trial.PENDING and t.trial_id not in self._ended:
                    return t
            if self._active() >= self._max_running:
                return None
            promoted, now = self._promoted_paused(), time.monotonic()
            for t in self._trials:
                # Not before its old actor is surely gone (Tune kills it STOPPED_TRIAL_KILL_S after the pause): the
                # old Train run, still training, would share the run folder with the resumed one.
                if t.trial_id in promoted and now - self._paused_since.get(t.trial_id, -math.inf) >= _restart_after():
                    return t  # restarted: its Train run resumes from the rung's checkpoint
            return None

        def debug_string(self) -> str:
            return f"synchronous successive halving at steps {self._rungs}, keeping 1/{self._rf}"

        # -- the rule
        def _promoted_paused(self) -> set[str]:
            """Promoted trials that are still paused: they may run again."""
            return {t.trial_id for t in self._trials if t.status == Trial.PAUSED
                    and t.trial_id not in self._ended and self._level.get(t.trial_id, 0) > self._paused_at(t)}

        def _paused_at(self, trial) -> int:
            """The rung a trial last recorded a score at (it waits there when paused)."""
            done = [i for i, scores in enumerate(self._scores) if trial.trial_id in scores]
            return done[-1] if done else -1

        def _cohort(self, level: int) -> list[str]:
            if level == 0:
                return [t.trial_id for t in self._trials]
            return [tid for tid in self._scores[level - 1] if self._level.get(tid, 0) >= level]

        def _decide(self, tune_controller, level: int, current=None) -> None:
            if self._decided[level] or (level and not self._decided[level - 1]):
                return  # a rung's cohort is known once the rung below it is decided
            cohort = self._cohort(level)
            if level == 0 and len(cohort) < self._expected:
                return  # trials not created yet will reach this rung too
            scores = self._scores[level]
            if any(tid not in scores and tid not in self._ended for tid in cohort):
                return
            self._decided[level] = True
            nan_last = lambda tid: (scores[tid] != scores[tid], -self._sign * scores[tid])  # noqa: E731
            ranked = sorted((tid for tid in cohort if tid in scores and tid not in self._ended), key=nan_last)
            keep = set(ranked[:promoted_count(len(ranked), self._rf)])
            log.info("halving at step %s: %d of %d trials go on", self._rungs[level], len(keep), len(ranked))
            losers = []
            for t in self._trials:  # the state first: stopping a trial calls back into this scheduler
                if t.trial_id in keep:
                    self._level[t.trial_id] = level + 1
                elif t.trial_id in ranked:
                    self._ended.add(t.trial_id)
                    losers.append(t)
            for t in losers:
                if t is not current and (t.status == Trial.PAUSED or t.is_saving):
                    tune_controller.stop_trial(t)
                    _save_status(tune_controller, t)

        def _end(self, tune_controller, trial) -> None:
            self._ended.add(trial.trial_id)
            for level in range(len(self._rungs)):  # a trial that ended before its rung no longer holds it up
                if not self._decided[level]:
                    self._decide(tune_controller, level)

    return SyncHalving


def _save_status(tune_controller, trial) -> None:
    """Ray 2.60 stops a trial that has no actor (a paused one) without marking it for the experiment's state file:
    the file kept PAUSED, so the table read the stopped trial as unfinished and a --resume would have run it again."""
    controller = getattr(tune_controller, "_tune_controller", tune_controller)  # the scheduler gets a wrapper
    mark = getattr(controller, "_mark_trial_to_checkpoint", None)
    if mark is not None:  # a private method: if a Ray upgrade drops it, the stale state is the only loss
        mark(trial)


def _make_generator_class():
    from ray.tune.search import BasicVariantGenerator

    class HalvingGenerator(BasicVariantGenerator):
        """Random search that creates a trial only while the scheduler has a free slot (see the module)."""

        def __init__(self, scheduler, **kwargs):
            super().__init__(max_concurrent=0, **kwargs)
            self._scheduler = scheduler

        def next_trial(self):
            if not self._scheduler.may_start_another():
                return None
            return super().next_trial()

        def get_state(self):
            state = super().get_state()
            if state:  # the scheduler object stays the one a restore built; its decisions travel with this state
                state.pop("_scheduler", None)
                state["_halving"] = self._scheduler.state()
            return state

        def set_state(self, state):
            state = dict(state)
            halving = state.pop("_halving", None)
            super().set_state(state)
            if halving is not None:
                self._scheduler.load_state(halving)

    return HalvingGenerator


def sync_halving(**kwargs):
    return _make_scheduler_class()(**kwargs)


def halving_generator(scheduler, **kwargs):
    return _make_generator_class()(scheduler, **kwargs)
