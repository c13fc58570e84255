"""What a search shows while it runs: one line per trial start, validation and end, in mtcore's words.

Ray Tune's own reporter prints a configuration banner, a TensorBoard hint and heartbeat tables of
every trial; its trials' Train workers print nothing to the driver. A search of 20 minutes would
otherwise be silent apart from Ray's lines, so `run_search` runs Tune quietly (`quiet_tune_output`)
and reports through `progress_callback` instead.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Iterator

from mtcore.distributed.tune.space import METRIC, TIME_ATTR, Param, flat_trial_values

# Ray's legacy output (RAY_AIR_NEW_OUTPUT=0) honours verbose=0 entirely; the new one prints its
# experiment banner and TensorBoard hint at any verbosity (ray/tune/experimental/output.py).
_NEW_OUTPUT = "RAY_AIR_NEW_OUTPUT"


@contextlib.contextmanager
def quiet_tune_output() -> Iterator[None]:
    """Within this block, Tune started with verbose=0 in this process prints nothing of its own: not its reporter,
    not its advice after Ctrl-C to call `Tuner.restore(...)` (mtcore says `--resume`), not Optuna's study lines."""
    import logging

    before = os.environ.get(_NEW_OUTPUT)
    os.environ[_NEW_OUTPUT] = "0"
    tune_log = logging.getLogger("ray.tune.tune")
    restore_advice = _DropMessages("Experiment has been interrupted", "Training has been interrupted",
                                   "Trials did not complete")
    tune_log.addFilter(restore_advice)
    # A failed trial's traceback (70 lines of Ray's): mtcore's line for it gives the error's own last line.
    controller_log = logging.getLogger("ray.tune.execution.tune_controller")
    trial_traceback = _DropMessages("Trial task failed for trial")
    controller_log.addFilter(trial_traceback)
    optuna_log = logging.getLogger("optuna")
    optuna_level = optuna_log.level
    optuna_log.setLevel(logging.WARNING)  # "A new study created in memory with name: optuna"
    try:
        yield
    finally:
        tune_log.removeFilter(restore_advice)
        controller_log.removeFilter(trial_traceback)
        optuna_log.setLevel(optuna_level)
        if before is None:
            os.environ.pop(_NEW_OUTPUT, None)
        else:
            os.environ[_NEW_OUTPUT] = before


def error_line(error, limit: int = 200) -> str:
    """The error a trial ended on, as the last line of its traceback (mtcore's errors are one line)."""
    lines = str(error).strip().splitlines()
    return lines[-1][:limit] if lines else ""


def _trial_error(trial) -> str:
    """The last line of a failed trial's error.txt (Tune's `get_error` reads it from storage, not yet synced then)."""
    try:
        text = Path(trial.error_file).read_text(encoding="utf-8")
    except (OSError, TypeError):
        return "see its error.txt"
    return error_line(text, 300) or "see its error.txt"


class _DropMessages:
    """A logging filter that drops records whose message starts with one of `prefixes`."""

    def __init__(self, *prefixes: str):
        self.prefixes = prefixes

    def filter(self, record) -> bool:
        return not str(record.getMessage()).startswith(self.prefixes)


def describe_values(values: dict[str, Any], space: tuple[Param, ...]) -> str:
    """`heads=4 warmup=300 label_smoothing=0.1 lr_scale=1.2`, in the order of the space."""
    def short(v: Any) -> str:
        return f"{v:.3g}" if isinstance(v, float) else str(v)

    return " ".join(f"{p.short}={short(values[p.key])}" for p in space if p.key in values)


def progress_callback(space: tuple[Param, ...], total: int, stream=None):
    """A Tune callback printing the search's progress on `stream` (stdout by default)."""
    from ray.tune import Callback

    class SearchProgress(Callback):
        def __init__(self):
            self.started: dict[str, float] = {}
            self.best: dict[str, float] = {}
            self.reported: set[str] = set()  # trials whose end was printed
            self.ended = 0

        def _print(self, line: str) -> None:
            print(line, file=stream or sys.stdout, flush=True)

        def on_trial_start(self, iteration, trials, trial, **info):
            again = trial.trial_id in self.started  # `halving` restarts a trial it paused at a rung and promoted
            self.started[trial.trial_id] = time.monotonic()  # its minutes below count from this start
            if again:
                steps = int((trial.last_result or {}).get(TIME_ATTR, 0))
                self._print(f"trial {_short_id(trial)} resumed: among the best at step {steps}, it trains on")
                return
            values = describe_values(flat_trial_values(trial.config or {}), space)
            self._print(f"trial {_short_id(trial)} started ({len(self.started)}/{total}): {values}")

        def on_trial_result(self, iteration, trials, trial, result, **info):
            if METRIC not in result or "final/test_bleu" in result:  # the closing report repeats the best
                return
            bleu = float(result[METRIC])
            best = max(self.best.get(trial.trial_id, -math.inf), bleu)
            self.best[trial.trial_id] = best
            loss = f"  dev loss {result['dev/loss']:.3f}" if "dev/loss" in result else ""
            self._print(f"trial {_short_id(trial)} step {int(result.get(TIME_ATTR, 0)):>6}  "
                        f"dev BLEU {bleu:.2f} (best {best:.2f}){loss}  {self._minutes(trial)}")

        def on_trial_complete(self, iteration, trials, trial, **info):
            self.ended += 1
            last = trial.last_result or {}
            steps = int(last.get(TIME_ATTR, 0))
            best = self.best.get(trial.trial_id)
            bleu = f"best dev BLEU {best:.2f}" if best is not None else "no validation"
            if "final/test_bleu" in last:
                how = f"finished at step {steps}: {bleu}, test BLEU {last['final/test_bleu']:.2f}"
            else:  # the scheduler (ASHA) stopped it
                how = f"stopped early at step {steps}: {bleu}"
            self._print(f"trial {_short_id(trial)} {how}  {self._minutes(trial)}  [{self.ended}/{total} done]")
            self.reported.add(trial.trial_id)

        def on_trial_error(self, iteration, trials, trial, **info):
            self.ended += 1
            self._print(f"trial {_short_id(trial)} failed ({self._minutes(trial)}): {_trial_error(trial)}; the "
                        f"search goes on  [{self.ended}/{total} done]")
            self.reported.add(trial.trial_id)

        def on_experiment_end(self, trials, **info):
            # The search's time budget and Ctrl-C stop the running trials without a per-trial callback.
            for trial in trials:
                if trial.trial_id in self.started and trial.trial_id not in self.reported:
                    steps = int((trial.last_result or {}).get(TIME_ATTR, 0))
                    self._print(f"trial {_short_id(trial)} ended unfinished at step {steps} (the search's time "
                                f"budget, or interrupted)  {self._minutes(trial)}")

        def _minutes(self, trial) -> str:
            start = self.started.get(trial.trial_id)
            return f"{(time.monotonic() - start) / 60:.1f} min" if start is not None else ""

    return SearchProgress()


def _short_id(trial) -> str:
    """The trial's number, as the results table prints it (`00003` of `8e0b2_00003`)."""
    return str(trial.trial_id).rpartition("_")[2]
