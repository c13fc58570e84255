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
from mtcore.checks import some_names
from mtcore.runs import folder_names

MARKER = "_stage.json"


class StageDir:
    def __init__(self, root: Path, name: str, settings: dict):
        self.name, self.path = name, root / name
        self.settings = json.loads(json.dumps(settings, sort_keys=True, default=str))  # as the marker stores them
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

    def changes(self) -> list[str]:
        """`ratio: 1.0 → 2.0`: what differs between the finished stage's settings and this run's (a marker written
        before the settings were kept in it: nothing to name)."""
        old = _flat(json.loads((self.path / MARKER).read_text()).get("settings") or {})
        if not old:
            return []
        new = _flat(self.settings)
        return [f"{k}: {_short(old.get(k))} → {_short(new.get(k))}" for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]

    def finish(self, report: dict) -> dict:
        body = {"stage": self.name, "settings_hash": self.hash, "settings": self.settings, "report": report}
        (self.path / MARKER).write_text(json.dumps(body, indent=2, ensure_ascii=False, default=str) + "\n")
        return report


class Donor:
    """Another run's output (`--reuse-from`) whose finished stages with this run's settings are used in place.

    Which of its stages were used, a digest of each one's marker, and the donor's path are written to
    OUT/_borrowed.json: if the donor's stages change afterwards (a rerun with --overwrite, a deletion), the
    stages this run made from them are stale and are made again. A rerun without --reuse-from checks
    against the recorded donor (it compared with no donor, found every stage changed and made all 7 again).
    A donor's stages include those it borrowed itself, so reuse follows a chain of runs."""

    RECORD = "_borrowed.json"

    def __init__(self, donor_root: str, local: dict[str, StageDir], settings: dict[str, dict], borrowable: tuple[str, ...]):
        self.local, self.settings, self.borrowable = local, settings, borrowable
        self.root = Path(donor_root).absolute() if donor_root else None
        self.stages = self._stages_of(self.root) if self.root else {}
        self.used: dict[str, str] = {}

    def _stages_of(self, root: Path, depth: int = 0) -> dict[str, StageDir]:
        """The finished stages `root` offers with this run's settings: its own, and those it borrowed."""
        own = {n: StageDir(root, self.local[n].path.name, self.settings[n]) for n in self.borrowable}
        offered = {n: st for n, st in own.items() if st.done}
        donor, _ = _record(root)
        if donor is not None and depth < 8 and donor != root:
            offered = {**self._stages_of(donor, depth + 1), **offered}
        return offered

    def offers(self, name: str) -> bool:
        return name in self.stages and self.stages[name].done

    def take(self, name: str) -> StageDir:
        stage = self.stages[name]
        self.used[name] = _digest(stage)
        return stage

    def drop_stale(self, root: Path, local: list[StageDir]) -> list[str]:
        """Remove this run's own finished stages if a stage they were made from has changed; their names."""
        donor, before = _record(root)
        if not before or (donor is None and self.root is None):  # an old record, no donor named: nothing to check
            return []
        stages = self._stages_of(donor) if donor is not None else self.stages
        now = {n: _digest(stages[n]) for n in before if n in stages and stages[n].done}
        if now == before:
            return []
        dropped = [s.name for s in local if s.path.exists()]
        for s in local:
            if s.path.exists():
                shutil.rmtree(s.path)
        (root / self.RECORD).unlink()
        return dropped

    def write_record(self, root: Path) -> None:
        if self.used:
            body = {"donor": str(self.root), "stages": self.used}
            (root / self.RECORD).write_text(json.dumps(body, indent=2) + "\n")


def recorded_donor(root: Path) -> str:
    """The run whose stages `root` used (its last --reuse-from), "" if none: a rerun without --reuse-from uses them
    again, as the README's "a rerun with the same --output reuses finished stages" says."""
    donor, _ = _record(root)
    return str(donor) if donor is not None else ""


def _record(root: Path) -> tuple[Path | None, dict[str, str]]:
    """(donor path, {stage: marker digest}) of `root`'s _borrowed.json; (None, {}) without one. A record written
    before the donor was kept in it is the digests alone."""
    path = root / Donor.RECORD
    if not path.is_file():
        return None, {}
    body = json.loads(path.read_text())
    if isinstance(body.get("stages"), dict):
        return Path(body["donor"]), body["stages"]
    return None, body


def _digest(stage: StageDir) -> str:
    return hashlib.sha256((stage.path / MARKER).read_bytes()).hexdigest()[:16]


def _flat(d: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out |= _flat(v, f"{prefix}{k}.")
        else:
            out[f"{prefix}{k}"] = v
    return out


def _short(value: object) -> str:
    text = "(none)" if value is None else repr(value)
    return text if len(text) <= 40 else text[:37] + "…"


JOB_FILES = {"report.json", "_data.json", "_mlflow_run.json", Donor.RECORD}  # and the exports augmented.*


def check_output(stages: list[StageDir], overwrite: bool) -> None:
    root = stages[0].path.parent
    own = {s.path.name for s in stages}
    # what a stage leaves while it is written (`runs.Stage.writing`): a hard kill (kill -9, the OOM killer) leaves them,
    # and the rerun, which restarts where the job stopped, refused them as another program's files
    own |= {f".{name}.{suffix}" for name in own for suffix in ("partial", "lock")}
    names = folder_names(root)
    foreign = {n for n in names if n not in own | JOB_FILES and not n.startswith("augmented.")}
    if foreign or (names and not names & (own | {"_mlflow_run.json"})):  # a report.json alone is not this job's
        raise BTError(f"{root}: holds files the back-translation job did not make ({some_names(foreign or names)}); "
                      f"it writes its stages, report.json and augmented.* there and replaces them when it runs "
                      f"again, even with --overwrite: choose another --output, or move them out first")
    conflicting = [s for s in stages if s.conflicting()]
    conflicts = [s.name for s in conflicting]
    if conflicts and not overwrite:
        changed = conflicting[0].changes()  # the first stage's: the later ones follow from it
        what = (f"; {conflicting[0].name}: {', '.join(changed[:4])}" + (f" and {len(changed) - 4} more" if len(changed) > 4 else "")
                if changed else "")
        raise BTError(
            f"{stages[0].path.parent} holds a different run's artifacts (stages {conflicts} were made with other "
            f"settings{what}); pass --overwrite to redo them or choose another --output"
        )
    if overwrite:
        for s in stages:
            if s.path.exists():
                shutil.rmtree(s.path)
        remove_outputs(stages[0].path.parent)
        (stages[0].path.parent / Donor.RECORD).unlink(missing_ok=True)  # every stage is made here again


def remove_outputs(root: Path) -> None:
    """The job's files made from its stages: the text exports of the augmented set, report.json and the data
    pointer. Left behind by a redo, they contradicted the new set (1,185 exported lines beside 597 rows, a
    pointer to a deleted stage after an interrupted --overwrite)."""
    for path in [*root.glob("augmented.*"), root / "report.json", root / "_data.json"]:
        if path.is_file():
            path.unlink()
