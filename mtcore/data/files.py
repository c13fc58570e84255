"""Reading a data file's bytes, gzip'd or not: the one place the corpus and catalog readers share."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path


def read_bytes(path: Path, error: type[Exception] = ValueError) -> bytes:
    """A file's bytes, decompressed when its name ends in .gz (any case); a damaged gzip raises `error` naming it."""
    raw = path.read_bytes()
    if path.suffix.lower() == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as err:
            raise error(f"{path}: not a readable gzip file: {err}") from None
    return raw
