"""Idempotent stages: a finished stage leaves a marker with a hash of its settings.

A rerun with the same output reuses every finished stage; an interrupted run
restarts at the first unfinished one. An output directory whose finished stages
were made with other settings is another run's: that is an error before any work
starts (or everything is redone under `--overwrite`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from mtcore.backtranslation.config import BTError, settings_hash

MARKER = "_stage.json"


class StageDir:
    def __init__(self, root: Path, name: str, settings: dict):
        self.name, self.path = name, root / name
        self.hash = settings_hash(settings)

    @property
    def done(self) -> bool:
        marker = self.path / MARKER
        return marker.is_file() and json.loads(marker.read_text())["settings_hash"] == self.hash

    def conflicting(self) -> bool:
        marker = self.path / MARKER
        return marker.is_file() and json.loads(marker.read_text())["settings_hash"] != self.hash

    def report(self) -> dict:
        return json.loads((self.path / MARKER).read_text())["report"]

    def begin(self) -> Path:
        """A clean directory for the stage (half-written leftovers of an interrupted run go)."""
        if self.path.exists():
            shutil.rmtree(self.path)
        self.path.mkdir(parents=True)
        return self.path

    def finish(self, report: dict) -> dict:
        body = {"stage": self.name, "settings_hash": self.hash, "report": report}
        (self.path / MARKER).write_text(json.dumps(body, indent=2, ensure_ascii=False, default=str) + "\n")
        return report


def check_output(stages: list[StageDir], overwrite: bool) -> None:
    conflicts = [s.name for s in stages if s.conflicting()]
    if conflicts and not overwrite:
        raise BTError(
            f"{stages[0].path.parent} holds a different run's artifacts (stages {conflicts} were made with other "
            f"settings); pass --overwrite to redo them or choose another --output"
        )
    if overwrite:
        for s in stages:
            if s.path.exists():
                shutil.rmtree(s.path)
