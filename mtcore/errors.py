"""One error boundary for every entry point.

A user's mistake (a bad option, a missing or damaged file, a wrong config key) must cost
one line on stderr, not a traceback:

    error: <file/key>: <what is wrong>; <what to do>

and exit code 2. The project's own errors derive from `MtcoreError`; `OSError` and
unpickling errors (a damaged `.pt` file) are treated the same way. Anything else is a
bug in mtcore and keeps its traceback. Either way the hooks registered with
`on_failure` run first (the tracking layer uses one to end its MLflow runs FAILED).

    @entry_point
    def main(argv=None) -> int: ...
"""

from __future__ import annotations

import functools
import os
import pickle
import select
import sys
from collections.abc import Callable
from pathlib import Path

EXIT_USER_ERROR = 2
EXIT_STDOUT_CLOSED = 128 + 13  # what a shell reports for a tool killed by SIGPIPE (`yes | head -1`)


class MtcoreError(Exception):
    """A bad input or setting the user can fix; the message names the file or key at fault."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, with what the user can do about it (e.g. how to resume)."""


EXIT_INTERRUPTED = 128 + 2  # as a shell reports a tool ended by SIGINT
_interrupted = False


def interrupted() -> bool:
    """Whether the entry point is ending on Ctrl-C (the failure hooks then mark runs KILLED, not FAILED)."""
    return _interrupted


# What a user can do about an OSError, by kind; the message already names the file.
_OS_HINTS: list[tuple[type[OSError], str]] = [
    (FileNotFoundError, "check the path"),
    (PermissionError, "choose a path you may write to (or fix its permissions)"),
    (NotADirectoryError, "a file stands where a directory is needed; choose another path"),
    (IsADirectoryError, "a directory stands where a file is needed; choose another path"),
    (FileExistsError, "remove it or choose another path"),
]

_failure_hooks: list[Callable[[], str | None]] = []
_path_names: dict[str, str] = {}


def name_path(path: str | Path, name: str) -> None:
    """Errors that mention `path` call it `name`: the saved copy of `--input -` is `stdin` to the user."""
    _path_names[str(path)] = name


def on_failure(hook: Callable[[], str | None]) -> Callable[[], str | None]:
    """Run `hook` when an entry point fails (user error or bug); a failing hook is ignored. What it returns, if
    anything, says what it did (shown after Ctrl-C)."""
    if hook not in _failure_hooks:
        _failure_hooks.append(hook)
    return hook


def is_user_error(err: BaseException) -> bool:
    return isinstance(err, (MtcoreError, OSError, pickle.UnpicklingError))


def one_line(err: BaseException) -> str:
    """The error as one line: `file: what is wrong; what to do` where the error knows it."""
    line = _describe(err)
    for path, name in _path_names.items():
        line = line.replace(path, name)
    return line


def _describe(err: BaseException) -> str:
    err = getattr(err, "cause", None) or err  # Ray wraps errors raised in tasks: report the original
    if isinstance(err, OSError) and err.filename is not None:
        what = err.strerror or type(err).__name__
        hint = next((h for kind, h in _OS_HINTS if isinstance(err, kind)), "check the path and the disk")
        target = f"{err.filename} -> {err.filename2}" if err.filename2 else str(err.filename)
        return f"{target}: {what}; {hint}"
    if isinstance(err, pickle.UnpicklingError):
        return f"not a file mtcore wrote, or a damaged one ({_squash(str(err))[:120]}); re-create it"
    return _squash(str(err)) or type(err).__name__


def _squash(text: str) -> str:
    return " ".join(text.split())


def _run_hooks() -> list[str]:
    """Run the failure hooks; what they did, in their words (a hook that did something returns a phrase)."""
    done = []
    for hook in _failure_hooks:
        try:
            if said := hook():
                done.append(said)
        except Exception:  # noqa: BLE001 - cleaning up after a failure must not hide it
            pass
    return done


def entry_point(main: Callable[..., int | None]) -> Callable[..., int]:
    """Wrap a `main(argv)`: user errors print one line and return 2; bugs keep their traceback."""

    @functools.wraps(main)
    def wrapped(*args, **kwargs) -> int:
        from mtcore import console

        argv = args[0] if args else kwargs.get("argv")
        console.configure(console.verbosity_from_argv(argv))
        home = console.home_from_argv(argv)
        if home:  # before `main` builds its parser: the defaults under the workspace follow it
            os.environ["MTCORE_HOME"] = str(Path(home).expanduser().absolute())
        global _interrupted
        _interrupted = False  # an entry point called again in one process (tests, notebooks) starts afresh
        try:
            return main(*args, **kwargs) or 0
        except KeyboardInterrupt as err:
            _interrupted = True
            done = _run_hooks()
            print(f"interrupted: {err}" if str(err) else "; ".join(["interrupted (Ctrl-C)", *done]), file=sys.stderr)
            return EXIT_INTERRUPTED
        except BrokenPipeError:
            _run_hooks()
            if not _stdout_closed():
                raise
            # `translate … | head -1`: the reader has what it wanted. Quiet, as Unix tools are; stdout goes to
            # /dev/null so that the interpreter's last flush does not print the same error again.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return EXIT_STDOUT_CLOSED
        except Exception as err:
            _run_hooks()
            if not is_user_error(err):
                raise
            print(f"error: {one_line(err)}", file=sys.stderr)
            return EXIT_USER_ERROR

    return wrapped


def _stdout_closed() -> bool:
    """Whether stdout is a pipe nobody reads any more (poll reports an error on its write end)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # stdout replaced by an object without a file descriptor
        return False


def run_main(main: Callable[..., int | None], argv: list[str] | None = None) -> int:
    """`sys.exit(run_main(main))` for a main that is not decorated."""
    return entry_point(main)(argv)
