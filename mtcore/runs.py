"""Workspace and Stage: where outputs live, and when an output that exists may be used again.

The workspace is the folder every job writes under: `--home`, else `$MTCORE_HOME`, else `./runs`
of the current directory (never inside the installed package). A stage is one output folder made
from settings, code and input files. Its identity is a fingerprint of all three, the inputs by
their *contents* (`content_hash`), so that

- a finished stage with the same fingerprint is reused, and says so;
- a stage made with another fingerprint is refused with one line naming what changed, unless
  `overwrite` (then it is made again);
- the outputs are written into a temporary sibling folder that is renamed into place when the
  stage is done: an interrupted run never leaves new rows beside an old report.

    stage = Stage(home() / "clean", "clean", settings=cfg.to_dict(), inputs={"corpus": path}, code=("mtcore.cleaning",))
    if (old := stage.reuse(overwrite)) is None:
        with stage.writing() as work:
            ...write into work...
            stage.finish(report)
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from mtcore import checks
from mtcore.errors import MtcoreError

log = logging.getLogger(__name__)
MANIFEST = "_stage.json"
_WHOLE_FILE = 1024**3  # files up to this size are hashed whole (about 0.6 s a GiB here); larger ones by size and samples
_SAMPLE = 1024**2
_CHUNK = 8 * 1024**2


class StageError(MtcoreError, ValueError):
    """An output folder that holds another run's work; the message says what changed and what to do.
    `changed` is the what-changed part alone, for callers that remake the stage themselves."""

    def __init__(self, message: str, changed: str = ""):
        super().__init__(message)
        self.changed = changed or message


def home(explicit: str | Path | None = None) -> Path:
    """The workspace: `explicit` (a `--home` option), else $MTCORE_HOME, else ./runs."""
    return Path(explicit or os.environ.get("MTCORE_HOME") or Path.cwd() / "runs").absolute()


# --------------------------------------------------------------------------- fingerprints


def input_files(path: str | Path, langs: tuple[str, str] | None = None) -> list[Path]:
    """The files a corpus path stands for: the file, the folder's files, or a Moses prefix's PREFIX.xx files
    (one language suffix each: not PREFIX.tok.en or a PREFIX.bpe folder; the name matched literally, so that
    `corpus[v2]` is not a glob pattern). With `langs`, a prefix's files of those two languages only: OPUS's
    PREFIX.ids, a PREFIX.log or a third language beside them are not the corpus."""
    path = Path(path)
    if path.is_dir():
        # as the reader skips them: any part of the path hidden or `_`-prefixed (Spark's _SUCCESS, a _tmp/ folder)
        return sorted(p for p in path.rglob("*") if p.is_file()
                      and not any(part.startswith((".", "_")) for part in p.relative_to(path).parts))
    if path.is_file():
        return [path]
    # The files the reader opens, found as it finds them (`Train.en` for the prefix `train`, `c.en.GZ`): a file the
    # reader opened and this list missed left the corpus unhashed, and a changed corpus reused.
    if langs:
        from mtcore.data.corpus import _side_file

        return sorted(f for f in (_side_file(path, lang) for lang in langs) if f.is_file())
    stem = path.name.lower() + "."
    parent = path.parent if path.parent.is_dir() else None
    suffixes = {p: p.name[len(stem):].lower() for p in (parent.iterdir() if parent else ())
                if p.name.lower().startswith(stem) and _LANGUAGE_SUFFIX.fullmatch(p.name[len(stem):]) and p.is_file()}
    languages = {p: suffix.split(".")[0] for p, suffix in suffixes.items() if suffix.split(".")[0] not in _FORMATS}
    plain = {lang for p, lang in languages.items() if not suffixes[p].endswith(".gz")}
    # the reader takes PREFIX.en over a PREFIX.en.gz beside it: that one is not the corpus
    return sorted(p for p, lang in languages.items() if not (suffixes[p].endswith(".gz") and lang in plain))


_LANGUAGE_SUFFIX = re.compile(r"[A-Za-z]{2,3}(?:[_-][A-Za-z0-9]{2,4})?(?:\.gz)?", re.IGNORECASE)  # en, vi, pt_BR, zh-Hans; .gz
_FORMATS = {"tsv", "txt", "tab", "csv", "po", "mo", "pot", "tok", "bpe", "json", "yml", "xml", "tmx", "py", "sh"}


def content_hash(path: str | Path, langs: tuple[str, str] | None = None) -> str:
    """A hash of what a file or folder holds: files up to 1 GiB whole; larger ones by their size, their
    modification time and three 1 MiB samples (start, middle, end). Renaming a file does not change it, nor
    touching or copying one up to 1 GiB; editing any file does (a same-size fix of a larger one between the
    samples is seen by its time: touching or copying such a file without `cp -p` costs a rerun, never a stale
    reuse). (At 8 MiB, an in-place fix of a 13 MB corpus went unseen.)"""
    path = Path(path)
    h = hashlib.sha256()
    for f in input_files(path, langs):
        size = f.stat().st_size
        name = f.relative_to(path) if path.is_dir() else f.name[len(path.name):]  # "" for a file, ".en" in a pair
        h.update(f"{name}\0{size}\0".encode())
        with f.open("rb") as fh:
            if size <= _WHOLE_FILE:
                while chunk := fh.read(_CHUNK):
                    h.update(chunk)
            else:
                h.update(f"{f.stat().st_mtime_ns}\0".encode())
                for offset in (0, size // 2, size - _SAMPLE):
                    fh.seek(offset)
                    h.update(fh.read(_SAMPLE))
    return h.hexdigest()[:16]


def code_version(*modules: str) -> str:
    """A hash of the source files of `modules` (packages include their data files, e.g. rule YAML)."""
    h = hashlib.sha256()
    for name in modules:
        origin = Path(importlib.util.find_spec(name).origin)
        root = origin.parent if origin.name == "__init__.py" else origin
        for f in sorted(root.rglob("*") if root.is_dir() else [root]):
            if f.suffix in (".py", ".yaml") and "__pycache__" not in f.parts:
                h.update(f.read_bytes())
    return h.hexdigest()[:12]


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    """`a.b.c` keys; a list of one-key mappings (the cleaning rules) by their keys, so that a changed setting is named
    as `rules.TestOverlap.languages`, not as the whole list of rules twice."""
    if isinstance(d, list) and d and all(isinstance(x, dict) and len(x) == 1 for x in d) \
            and len({next(iter(x)) for x in d}) == len(d):
        d = {next(iter(x)): next(iter(x.values())) for x in d}
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out |= _flatten(v, f"{prefix}{k}.")
        return out
    return {prefix[:-1]: d}


# --------------------------------------------------------------------------- stages


@dataclass
class Stage:
    path: Path
    kind: str  # what made it: "clean", "align_filter", "bt/reverse_model", ...
    settings: dict[str, Any] = field(default_factory=dict)
    inputs: dict[str, str | Path] = field(default_factory=dict)  # name -> file or folder
    code: tuple[str, ...] = ()  # modules whose source is part of the identity
    languages: tuple[str, str] | None = None  # a Moses-prefix input is its files of these languages
    extras: tuple[str, ...] = ()  # glob patterns of files a command adds to the finished stage (text exports, plots)

    def __post_init__(self):
        self.path = Path(self.path)

    @cached_property
    def identity(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "settings": json.loads(json.dumps(self.settings, default=str)),
            "inputs": {k: {"path": str(v), "content": content_hash(v, self.languages)} for k, v in sorted(self.inputs.items())},
            "code": code_version(*self.code) if self.code else "",
        }

    @property
    def fingerprint(self) -> str:
        body = {k: v for k, v in self.identity.items() if k != "inputs"}
        body["inputs"] = {k: v["content"] for k, v in self.identity["inputs"].items()}
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]

    def manifest(self) -> dict[str, Any] | None:
        marker = self.path / MANIFEST
        if not marker.is_file():
            return None
        try:
            return json.loads(marker.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):  # a damaged manifest: still a stage's folder, made again on --overwrite
            return {}

    def reuse(self, overwrite: bool = False) -> dict[str, Any] | None:
        """The finished stage's report if it can be reused; None if it must be made (again).
        Raises StageError if the folder holds other work and `overwrite` is not set, or holds files no stage made."""
        checks.output_apart(self.path, self.inputs)  # before the settings: `--input runs/clean --output runs/clean`
        old = self.manifest()
        self._seen = self._state()  # `writing` refuses if another run has written the folder since
        same = old is not None and old.get("fingerprint") == self.fingerprint
        if same and not overwrite:
            missing = [name for name in old.get("outputs", ()) if not (self.path / name).exists()]
            if not missing:
                return old.get("report", {})
        names = folder_names(self.path)
        if names and old is None and _older_stage(self.path):  # mtcore's before stages had manifests
            old = {}
        if names and old is None:  # --overwrite replaces a stage's output, never a folder of the user's
            raise StageError(f"{self.path}: holds files that no mtcore stage made ({checks.some_names(names)}); "
                             f"mtcore replaces only "
                             f"its own outputs, even with --overwrite: choose another output, or empty that folder "
                             f"yourself", changed="it holds files that no mtcore stage made")
        if foreign := names - _stage_names(old, names, self.extras):  # the folder is swapped whole: they would go with it
            raise StageError(f"{self.path}: also holds files its stage did not make ({checks.some_names(foreign)}); mtcore "
                             f"replaces only its own outputs, even with --overwrite: move them out first",
                             changed="it holds files its stage did not make")
        if same and not overwrite:
            log.warning("%s: made with these settings, but %s is missing; making it again", self.path,
                        ", ".join(missing))
            return None
        if names and not overwrite:
            what = "; ".join(self.changes(old))
            raise StageError(f"{self.path}: made with other settings or inputs ({what}); pass --overwrite to make "
                             f"it again, or choose another output", changed=what)
        return None

    def _state(self) -> tuple[bytes | None, frozenset[str]]:
        """What `reuse` judged: the manifest's bytes and the folder's names."""
        marker = self.path / MANIFEST
        return (marker.read_bytes() if marker.is_file() else None), frozenset(folder_names(self.path))

    def changes(self, old: dict[str, Any]) -> list[str]:
        """What differs between a stored manifest and this stage, one phrase per difference."""
        if not old:
            return ["it was made by an earlier mtcore, or its manifest is damaged"]
        new, out = self.identity, []
        if old.get("kind") != new["kind"]:
            out.append(f"it is a {old.get('kind')!r} stage, not {new['kind']!r}")
        before, after = _flatten(old.get("settings", {})), _flatten(new["settings"])
        for key in sorted(set(before) | set(after)):
            if before.get(key) != after.get(key):
                out.append(f"setting `{key}`: {before.get(key)!r} -> {after.get(key)!r}")
        for name in sorted(set(old.get("inputs", {})) - set(new["inputs"])):
            out.append(f"input `{name}` {old['inputs'][name].get('path')}: not given this time")
        for name, now in new["inputs"].items():
            was = old.get("inputs", {}).get(name)
            if was is None or was["content"] != now["content"]:
                same_path = was is not None and was["path"] == now["path"]
                out.append(f"input `{name}` {now['path']}: " + ("its contents changed" if same_path else
                           f"another input (was {was['path'] if was else 'none'})"))
        if old.get("code") != new["code"]:
            out.append(f"the code of {', '.join(self.code)} changed")
        return out or ["unknown difference"]

    @contextlib.contextmanager
    def writing(self) -> Iterator[Path]:
        """A fresh temporary folder beside the stage; renamed into place after `finish` was called in it.
        One run at a time: a second run into the same output is refused while this one works, and after it
        if the folder is no longer what that run's `reuse` judged (two runs of other settings, started
        together, silently replaced each other's output, or left a manifest without its kept pairs)."""
        with _exclusive(self.path):
            if getattr(self, "_seen", None) is not None and self._state() != self._seen:
                raise StageError(f"{self.path}: another run wrote it while this one was starting; run again to "
                                 f"reuse or refuse what it made", changed="another run wrote it meanwhile")
            work = self.path.with_name(f".{self.path.name}.partial")
            if work.exists():  # an interrupted run's: no run holds the lock on it now
                shutil.rmtree(work)
            work.mkdir(parents=True)
            self._work, self._report = work, None
            try:
                yield work
                if self._report is None:
                    raise RuntimeError(f"stage {self.kind}: finish() was not called")
                outputs = sorted(p.name for p in work.iterdir())  # what a reuse must find again
                (work / MANIFEST).write_text(json.dumps(
                    {**self.identity, "fingerprint": self.fingerprint, "report": self._report, "outputs": outputs},
                    indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
                old = self.path.with_name(f".{self.path.name}.old")
                if self.path.exists():
                    if old.exists():
                        shutil.rmtree(old)
                    self.path.rename(old)
                work.rename(self.path)
                shutil.rmtree(old, ignore_errors=True)
            finally:
                if work.exists():
                    shutil.rmtree(work, ignore_errors=True)

    def finish(self, report: dict[str, Any]) -> None:
        self._report = report


def _older_stage(path: Path) -> bool:
    """A folder an mtcore stage wrote before stages had manifests (`runs/clean` of 2026-11-22): report.json and kept/,
    and nothing but a stage's files."""
    names = folder_names(path)
    return {"kept", "report.json"} <= names and names <= _stage_names({}, names, ("kept.*",))


# What a desktop leaves in any folder it shows: not a user's work, gone with the folder.
_LITTER = {".DS_Store", "Thumbs.db", "desktop.ini"}
# A stage folder's names when its manifest does not list them (damaged, or written before manifests had lists).
_STAGE_FILES = {MANIFEST, "kept", "rejects", "report.json", "histogram.png", "scores.parquet", "_scored",
                "rejects_by_reason.png", "score_histograms.png"}


def folder_names(path: Path) -> set[str]:
    """A folder's entries that matter when it is replaced: hidden ones too (a `.git` or `.env` is a user's), bar
    desktop litter."""
    if not path.is_dir():
        return set()
    return {p.name for p in path.iterdir() if p.name not in _LITTER and not p.name.startswith("._")}


def _stage_names(manifest: dict[str, Any] | None, names: set[str], extras: tuple[str, ...]) -> set[str]:
    """The names in a stage folder that its stage made: what its manifest lists (or a stage's usual files), the
    manifest, and what its command adds afterwards (`extras`: kept.tsv, kept.en beside kept/, MLflow's plots)."""
    listed = set((manifest or {}).get("outputs") or _STAGE_FILES)
    return listed | {MANIFEST} | {n for n in names if any(fnmatch.fnmatchcase(n, pattern) for pattern in extras)}


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    """Hold `.NAME.lock` beside `path` while a stage is written there; refuse, naming the holder, if another
    process holds it. The file is removed on release; a lock taken on a file removed meanwhile is taken again."""
    import fcntl

    lock = path.with_name(f".{path.name}.lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise StageError(f"{path}: another mtcore run ({holder}) is writing it now; wait for it to end, or "
                             f"choose another output", changed="another run is writing it") from None
        try:
            if os.fstat(fd).st_ino == os.stat(lock).st_ino:
                break
        except FileNotFoundError:  # its holder removed it as we opened it
            pass
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}".encode(), 0)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)
        os.close(fd)


# --------------------------------------------------------------------------- a job's output as training data

DATA_POINTER = "_data.json"


def write_data_pointer(root: str | Path, data: str | Path, fingerprint: str, mlflow_run_id: str | None) -> None:
    """Mark ROOT as a job output whose training data is DATA: `--data ROOT` then trains on it, and the
    training run is tagged with this fingerprint and MLflow run (lineage)."""
    root = Path(root)
    body = {"data": str(Path(data).relative_to(root)), "fingerprint": fingerprint, "mlflow_run_id": mlflow_run_id}
    (root / DATA_POINTER).write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")


def recorded_languages(path: str | Path) -> tuple[str, str] | None:
    """The (src, tgt) column languages a cleaning or alignment-filter stage recorded for its output (`clean --langs
    vi-en`): for the stage folder or its kept/; None for any other corpus."""
    path = Path(path)
    for report in (path / "report.json", path.parent / "report.json" if path.name == "kept" else None):
        if report is not None and report.is_file():
            try:
                config = json.loads(report.read_text(encoding="utf-8")).get("config", {})
                langs = config.get("languages") or config.get("langs")  # cleaning's key; the alignment filter's
            except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
                return None
            return tuple(langs) if isinstance(langs, list) and len(langs) == 2 else None
    return None


def languages_of(path: str | Path, given: str | None, name: str = "--langs") -> tuple[str, str]:
    """A data stage's languages: `given` (its --langs), else those the stage that made `path` recorded (an en-de
    cleaning output is en-de without saying it twice), else en-vi, the project's pair."""
    if given:
        return checks.language_pair(given, name)
    return recorded_languages(path) or ("en", "vi")


def resolve_data(path: str | Path) -> tuple[Path, dict[str, Any]]:
    """A corpus path as given, or a job/stage output folder resolved to the data it made:
    a folder with _data.json (e.g. runs/backtranslate → its assembled set), or a stage with `kept/`.
    Returns (path, lineage): the producing stage's fingerprint and MLflow run, where known."""
    path = Path(path)
    if (path / DATA_POINTER).is_file():
        body = json.loads((path / DATA_POINTER).read_text(encoding="utf-8"))
        return path / body["data"], {"fingerprint": body.get("fingerprint"), "mlflow_run_id": body.get("mlflow_run_id"),
                                     "stage": str(path)}
    if (path / MANIFEST).is_file() and (path / "kept").is_dir():
        body = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
        return path / "kept", {"fingerprint": body.get("fingerprint"), "mlflow_run_id": body.get("report", {}).get(
            "mlflow_run_id"), "stage": str(path)}
    return path, {}
