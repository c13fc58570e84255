"""Progress lines from Ray Train workers to the user's console.

A worker's stdout goes to Ray's log files, which the user does not read, so rank 0 appends its lines to a file
in the run's storage and the driver prints them as they come (`follow_progress`), on one machine and on a
cluster whose storage every node shares.
"""
from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

PROGRESS_FILE = "progress.log"


class ProgressFile:
    """Rank 0's side: appends lines, and tells the time spent (against a budget, when there is one)."""

    def __init__(self, path: Path, budget_min: float, enabled: bool):
        self.path, self.budget, self.enabled, self.t0 = path, budget_min, enabled, time.perf_counter()
        if enabled:
            path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, line: str) -> None:
        if self.enabled:
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(line + "\n")

    def clock(self) -> str:
        spent = (time.perf_counter() - self.t0) / 60
        return f"{spent:.1f}/{self.budget:g} min" if self.budget else f"{spent:.1f} min"


@contextlib.contextmanager
def follow_progress(path: Path, echo=print, waiting=None, wait_s: float = 90.0):
    """Print the lines a run appends to `path` while the body runs (a daemon thread tails the file).

    `waiting()`: a line said every `wait_s` until the run writes its first line. Ray Train waits for free CPUs or
    GPUs without end and without a word (a job holding them, nodes still joining): the user sees why."""
    stop = threading.Event()
    # Where the run's new lines start, taken here and not in the thread: a line written before the thread ran was
    # skipped as an old one (a resumed run's old lines are not repeated).
    first = path.stat().st_size if path.exists() else 0

    def tail() -> None:
        offset, started, noted = first, first, time.monotonic()
        while True:
            if path.exists():
                with path.open(encoding="utf-8") as fh:
                    fh.seek(offset)
                    for line in fh.readlines():
                        echo(line.rstrip("\n"))
                    offset = fh.tell()
            if waiting is not None and offset == started and time.monotonic() - noted >= wait_s:
                noted = time.monotonic()
                with contextlib.suppress(Exception):  # a line of help never fails the run
                    echo(waiting())
            if stop.wait(min(1.0, wait_s)):
                if not path.exists() or path.stat().st_size == offset:
                    return

    thread = threading.Thread(target=tail, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
