"""Idempotent stages: a finished stage leaves a marker with a hash of its settings.

A rerun with the same output reuses every finished stage; an interrupted run
restarts at the first unfinished one. An output directory whose finished stages
were made with other settings is another run's: that is an error before any work
starts (or everything is redone under `--overwrite`).
"""

from __future__ import annotations

import hashlib
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


class Donor:
    """Another run's output (`--reuse-from`) whose finished stages with this run's settings are used in place.

    Which of its stages were used, and a digest of each one's marker, are written to OUT/_borrowed.json:
    if the donor's stages change afterwards (a rerun with --overwrite, a deletion), the stages this run
    made from them are stale and are made again."""

    RECORD = "_borrowed.json"

    def __init__(self, donor_root: str, local: dict[str, StageDir], settings: dict[str, dict], borrowable: tuple[str, ...]):
        root = Path(donor_root).absolute() if donor_root else None
        self.stages = {n: StageDir(root, local[n].path.name, settings[n]) for n in borrowable} if root else {}
        self.used: dict[str, str] = {}

    def offers(self, name: str) -> bool:
        return name in self.stages and self.stages[name].done

    def take(self, name: str) -> StageDir:
        stage = self.stages[name]
        self.used[name] = _digest(stage)
        return stage

    def drop_stale(self, root: Path, local: list[StageDir]) -> list[str]:
        """Remove this run's own finished stages if a stage they were made from has changed; their names."""
        record = root / self.RECORD
        if not record.is_file():
            return []
        before = json.loads(record.read_text())
        now = {n: _digest(self.stages[n]) for n in before if self.offers(n)}
        if now == before:
            return []
        dropped = [s.name for s in local if s.path.exists()]
        for s in local:
            if s.path.exists():
                shutil.rmtree(s.path)
        record.unlink()
        return dropped

    def write_record(self, root: Path) -> None:
        if self.used:
            (root / self.RECORD).write_text(json.dumps(self.used, indent=2) + "\n")


def _digest(stage: StageDir) -> str:
    return hashlib.sha256((stage.path / MARKER).read_bytes()).hexdigest()[:16]


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
