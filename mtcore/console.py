"""The terminal: mtcore's own lines and progress; Ray's and MLflow's only when they warn (or with -v).

Every entry point's parser has -q/-v (`add_verbosity`), and `errors.entry_point` calls `configure`
before `main` runs, so that logging is set up in this one place:
- mtcore's loggers print their bare messages at INFO (-q: warnings only; -v: DEBUG);
- Ray, MLflow and the libraries below them print WARNING and above (-v: everything at INFO);
- Ray Data keeps its progress bars on a terminal; elsewhere (a log file, CI) its 14-line progress
  block every 10 s becomes one line of rows done per operator (-q: none).
Settings go into the environment with `setdefault`, before Ray or MLflow is imported, so that a
user's own RAY_DATA_LOGGING_CONFIG or MLFLOW_LOGGING_LEVEL still wins.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import tempfile
from pathlib import Path

QUIET, NORMAL, VERBOSE = -1, 0, 1

# Loggers of other projects that speak at INFO during ordinary work.
THIRD_PARTY = ("ray", "mlflow", "alembic", "urllib3", "filelock", "fsspec", "py.warnings", "matplotlib", "PIL")
# INFO-worthy for Ray, noise for an mtcore user: mtcore turns token authentication on deliberately.
QUIET_BELOW_ERROR = ("ray._private.authentication.authentication_token_setup",)


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Says an option's default where there is one to say: not on a required option, a flag, a None or a help
    text that names its own ("--model MODEL (default: None)", "-q (default: 0)" were printed)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (action.required or action.default in (None, False, argparse.SUPPRESS) or "default" in text
                or isinstance(action, (argparse._StoreConstAction, argparse._StoreTrueAction))):
            return text
        return super()._get_help_string(action)


def add_verbosity(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("-q", "--quiet", dest="verbosity", action="store_const", const=QUIET, default=NORMAL,
                       help="warnings and the final summary only")
    group.add_argument("-v", "--verbose", dest="verbosity", action="store_const", const=VERBOSE,
                       help="also Ray's and MLflow's own INFO lines")
    return parser


def add_common_options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """-q/-v and --home, which every entry point takes (`errors.entry_point` acts on them before `main`)."""
    add_verbosity(parser)
    parser.add_argument("--home", metavar="DIR", help="the workspace: default outputs, checkpoints and the MLflow "
                        "store go under it (default: $MTCORE_HOME, else ./runs)")
    return parser


def home_from_argv(argv: list[str] | None) -> str | None:
    """--home from a command line whose other options are the entry point's business."""
    probe = argparse.ArgumentParser(add_help=False)
    probe.add_argument("--home")
    args, _ = probe.parse_known_args(sys.argv[1:] if argv is None else list(argv))
    return args.home


def program(documented: str) -> str:
    """The name a parser shows in its usage: `mtcore X` under the console script, else the documented command."""
    return sys.argv[0] if sys.argv and sys.argv[0].startswith("mtcore ") else documented


def verbosity_from_argv(argv: list[str] | None) -> int:
    """-q/-v from a command line whose other options are the entry point's business."""
    probe = add_verbosity(argparse.ArgumentParser(add_help=False))
    args, _ = probe.parse_known_args(sys.argv[1:] if argv is None else list(argv))
    return args.verbosity


class _Formatter(logging.Formatter):
    """mtcore's INFO lines bare (they are the tool talking); everything else says where it comes from."""

    def format(self, record: logging.LogRecord) -> str:
        if record.name.startswith("mtcore") and record.levelno == logging.INFO:
            return record.getMessage()
        return f"{record.levelname.lower()}: {record.name}: {record.getMessage()}"


_configured: int | None = None


class _LiveStderr(logging.StreamHandler):
    """Writes to whatever sys.stderr is when a line is logged: an entry point called twice in one process (tests,
    notebooks) may have another stderr the second time, and the first one may be closed."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def configure(verbosity: int = NORMAL) -> None:
    """Set up logging for an entry point (idempotent; a later call with another verbosity wins)."""
    global _configured
    if _configured == verbosity:
        return
    _configured = verbosity
    third_party = logging.INFO if verbosity >= VERBOSE else logging.WARNING if verbosity == NORMAL else logging.ERROR
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", logging.getLevelName(third_party))
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # a bar per artifact download
    if verbosity < VERBOSE:
        os.environ.setdefault("RAY_DATA_LOGGING_CONFIG", str(_ray_data_logging_config(verbosity)))
        # "🏃 View run … at: http://…" on stdout as each run of a tracking server ends, even under -q
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")

    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, "_mtcore", False)]:
        root.removeHandler(handler)
    handler = _LiveStderr()
    handler.setFormatter(_Formatter())
    handler._mtcore = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("mtcore").setLevel(
        logging.DEBUG if verbosity >= VERBOSE else logging.INFO if verbosity == NORMAL else logging.WARNING)
    for name in THIRD_PARTY:
        logging.getLogger(name).setLevel(third_party)
    for name in QUIET_BELOW_ERROR:
        logging.getLogger(name).setLevel(third_party if verbosity >= VERBOSE else logging.ERROR)
    logging.captureWarnings(True)  # warnings.warn from libraries: one line through logging, not two


def progress_line(line: str) -> None:
    """A progress line of a long run (a training step, a validation): printed, except under -q, which keeps only
    the lines that warn (`warning: …`, on stderr)."""
    warning = line.startswith("warning:")
    if _configured == QUIET and not warning:
        return
    print(line, file=sys.stderr if warning else sys.stdout, flush=True)


def quiet() -> bool:
    """-q was given to the entry point that runs."""
    return _configured == QUIET


class StderrHandler(logging.StreamHandler):
    """A stream handler on the current sys.stderr (Ray Data's config loader does not resolve `ext://`)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)


class NoCpuRecheck(logging.Filter):
    """Ray Data warns that the cluster "does not have any available CPUs" and the job "will hang" when, at the
    start of an execution, no CPU is free. Writing a dataset executes twice, and the second check runs just
    after the first execution's own tasks ended, before Ray has returned their CPUs: a false alarm on every
    small write with one task per CPU. The claim is checked again a moment later; only a real shortage
    (CPUs held by actors, Tune trials, another job) reaches the user."""

    def filter(self, record: logging.LogRecord) -> bool:
        if "does not have any available CPUs" not in record.getMessage():
            return True
        import time

        import ray

        for _ in range(20):
            if ray.is_initialized() and ray.available_resources().get("CPU", 0) > 0:
                return False
            time.sleep(0.05)
        return True


_PROGRESS_LINE = re.compile(r"^(?P<name>\S.*?): (?P<done>\d+)/(?P<total>\d+|\?)$")


class RayDataProgress(logging.Filter):
    """Of Ray Data's progress block for a non-terminal, one line: rows (or blocks) done per operator."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        if msg.startswith("======= Running Dataset"):
            self.parts = []
            return False
        if msg.startswith("=" * 10):  # the block's closing rule: emit what it held
            parts, self.parts = self.parts, []
            if not any(int(part.rsplit(" ", 1)[1].split("/")[0]) for part in parts):
                return False  # the block logged at the start: nothing done yet
            record.msg, record.args = "ray data  " + " · ".join(parts), None
            return True
        match = _PROGRESS_LINE.match(msg)
        if match and match["name"] != "Total Progress":
            self.parts.append(f"{match['name']} {match['done']}/{match['total']}")
        return False


def _ray_data_logging_config(verbosity: int) -> Path:
    """Ray Data's own logging config (its default, mtcore/console.py's levels): warnings on the console,
    the one-line progress filter for non-terminals, everything in the session's ray-data.log as before."""
    config = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"ray": {"format": "%(asctime)s\t%(levelname)s %(filename)s:%(lineno)s -- %(message)s"},
                       "progress": {"format": "%(message)s"}},
        "filters": {"console_filter": {"()": "ray.data._internal.logging.HiddenRecordFilter"},
                    "progress_line": {"()": "mtcore.console.RayDataProgress"},
                    "cpu_recheck": {"()": "mtcore.console.NoCpuRecheck"}},
        "handlers": {
            "file": {"class": "ray.data._internal.logging.SessionFileHandler", "formatter": "ray",
                     "filename": "ray-data.log"},
            "console": {"class": "ray._private.log.PlainRayHandler", "formatter": "ray", "level": "WARNING",
                        "filters": ["console_filter", "cpu_recheck"]},
            "progress": {"class": "mtcore.console.StderrHandler", "formatter": "progress",
                         "level": "INFO" if verbosity == NORMAL else "CRITICAL", "filters": ["progress_line"]},
        },
        "loggers": {
            "ray.data": {"level": "DEBUG", "handlers": ["file", "console"], "propagate": False},
            "ray.data._internal.progress.logging_progress": {"level": "INFO", "handlers": ["progress"],
                                                             "propagate": True},
        },
    }
    path = Path(tempfile.gettempdir()) / f"mtcore-ray-data-logging-{os.getuid()}-{verbosity}.yaml"
    partial = path.with_name(f"{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(config))  # JSON is YAML; Ray Data reads it with yaml.safe_load
    os.replace(partial, path)
    return path
