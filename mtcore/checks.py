"""Checks of command-line options that run before any work (before Ray starts or data is read).

Each raises `UsageError` naming the option, what is wrong and what to pass instead, so a
mistake costs a second and one line, not a cleaning run and a traceback.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from mtcore.errors import MtcoreError


class UsageError(MtcoreError, ValueError):
    """An option or setting out of its range; the message names it."""


def at_least(name: str, value: float | None, low: float) -> None:
    """`value >= low` (None = the option's default, not checked)."""
    if value is not None and value < low:
        raise UsageError(f"{name}: {value} is out of range; pass a value >= {low:g}")


def open_share(name: str, value: float, example: float = 0.17) -> None:
    """A share strictly between 0 and 1 (nan fails too; a negative share misaligned every row)."""
    if not 0 < value < 1:
        raise UsageError(f"{name}: {value} is out of range; pass a share in (0, 1), e.g. {example:g}")


def one_of(name: str, value: str, choices: Iterable[str]) -> None:
    choices = list(choices)
    if value not in choices:
        raise UsageError(f"{name}: unknown value {value!r}; choose from {choices}")


_REGIONS = {"BR", "CN", "TW", "HK", "US", "GB", "MX", "AU", "SG"}
LANGUAGE_CODE = re.compile(r"[a-z]{2,3}(?:_[a-z]{2}|_[a-z]{4})?")  # en, vi, pt_br, zh_cn, sr_latn (OPUS's names)


def language_pair(value: str, name: str = "--langs") -> tuple[str, str]:
    """"de-en" → ("de", "en"): two different ISO 639 codes (2–3 letters), lower-cased; a code may carry OPUS's region
    or script, "en-pt_BR" → ("en", "pt_br") (`base_language` is the language itself)."""
    text = str(value).strip()
    src, _, tgt = text.partition("-")
    # "pt-BR" is one language and its region, not Portuguese → Breton (regions that are no usual language code, or
    # whose language nobody pairs this way; "en-DE" or "en-CA" stay pairs)
    if re.fullmatch(r"[a-z]{2,3}-[A-Z]{2}", text) and tgt in _REGIONS:
        raise UsageError(f"{name} {value}: one language and its region? {name} takes the pair, source first, with a "
                         f"region written OPUS's way: en-{src}_{tgt}")
    src, tgt = src.lower(), tgt.lower()
    if not LANGUAGE_CODE.fullmatch(src) or not LANGUAGE_CODE.fullmatch(tgt):
        raise UsageError(f"{name} {value}: expected two language codes, source first, e.g. de-en or en-zh_CN")
    if src == tgt:
        raise UsageError(f"{name} {value}: the two languages are the same; expected a pair such as de-en")
    return src, tgt


def base_language(code: str) -> str:
    """"pt_br" → "pt": what language identification and the rules know."""
    return code.split("_", 1)[0].lower()


def input_file(name: str, path: str | Path) -> Path:
    """A file that exists and is not a directory (a pipe such as /dev/stdin or bash's <(zcat f) is one)."""
    path = Path(path)
    if not path.exists() or path.is_dir():
        raise UsageError(f"{name}: {path} {'is a directory' if path.is_dir() else 'not found'}; pass a text file")
    return path


def output_file(name: str, path: str | Path) -> Path:
    """A file that can be written: not a directory, in a folder that exists and is writable."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{name}: {path} is a directory; pass a file path")
    folder = path.parent
    if not folder.is_dir():
        raise UsageError(f"{name}: {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK) or path.exists() and not os.access(path, os.W_OK):
        raise UsageError(f"{name}: {path} is not writable; choose a path you may write to")
    return path


def output_dir(path: str | Path, name: str = "--output") -> Path:
    """An output directory that exists or can be made, is a directory and can be written to.

    Nothing is created here: the check must leave no trace when a later check fails."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{name}: {path} is a file, not a directory; choose another path")
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is None or not existing.is_dir():
        raise UsageError(f"{name}: {path} cannot be created ({existing} is not a directory); choose another path")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{name}: {existing} is not writable; choose a path you may write to")
    return path


def replaceable_dir(path: Path, what: str, is_one, name: str = "--output") -> None:
    """An output folder that will be replaced whole: absent, empty, or `what` (`is_one(path)`) already, never
    a folder of other files, which the replacement would delete."""
    if path.is_dir() and any(path.iterdir()) and not is_one(path):
        raise UsageError(f"{name}: {path} holds files that are not {what} ({some_names(path)}), and the output "
                         f"replaces the folder whole; choose another output, or empty that folder yourself")


def some_names(folder: Path | Iterable[str], most: int = 3) -> str:
    """What a folder holds (or these names), for a message: "a, b, c and 4 more"."""
    names = sorted(p.name for p in folder.iterdir()) if isinstance(folder, Path) else sorted(folder)
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def output_apart(output: str | Path, inputs: dict[str, str | Path], name: str = "--output") -> None:
    """The output folder neither holds nor lies inside an input: writing it (or `--overwrite`) would replace
    the data it is reading."""
    out = Path(output).expanduser().resolve()
    cwd = Path.cwd().resolve()
    if out == cwd or out in cwd.parents:  # the stage swaps its folder in whole: the shell would be left nowhere
        raise UsageError(f"{name}: {output} is (or holds) the current directory; choose a folder below it, "
                         "e.g. runs/NAME")
    for what, path in inputs.items():
        inp = Path(path).expanduser().resolve()
        if inp == out or out in inp.parents:
            raise UsageError(f"{name}: {output} holds the input {what} ({path}): the stage would replace what it reads; "
                             "choose another output")
        if inp in out.parents and inp.is_dir():
            raise UsageError(f"{name}: {output} lies inside the input {what} ({path}): the stage would change what it "
                             "reads; choose another output")


def parquet_columns(path: str | Path, required: Iterable[str], name: str = "--input") -> None:
    """A Parquet file or directory has the columns a stage reads (checked on the schema, no data read)."""
    import pyarrow.dataset as pads

    path = Path(path)
    if not (path.suffix == ".parquet" or path.is_dir()):
        return
    try:
        names = pads.dataset(str(path), format="parquet").schema.names
    except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError
        raise UsageError(f"{name}: {path} is not readable Parquet ({' '.join(str(err).split())[:120]})") from None
    missing = [c for c in required if c not in names]
    if missing:
        raise UsageError(f"{name}: {path} has no column(s) {missing} (it has {names}); "
                         "a parallel corpus needs `src` and `tgt`")
