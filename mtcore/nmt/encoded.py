"""A training corpus encoded once, on disk, read by every worker through the page cache.

Every DDP worker used to read the whole corpus and encode it into Python lists of ints of its own: about
3.4 KB per pair (10M pairs: 34 GB per worker, a copy per GPU) and seconds to minutes per worker start. The
driver now encodes it once (`write_encoded`, by chunks) into four flat arrays, the token ids of each side
(int32) and their offsets (int64), about 0.3 KB per pair; workers open them memory-mapped (`EncodedPairs`),
so the pages are shared by all the workers of a node. The ids are those `Tokenizer.encode` gives: training
on them is training on the texts.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from mtcore.nmt.tokenizer import Tokenizer

_FILES = ("src_ids", "src_offsets", "tgt_ids", "tgt_offsets")
CHUNK_PAIRS = 100_000  # pairs encoded at a time: the driver never holds more of them as Python ints


def write_encoded(pairs: Sequence[tuple[str, str]], tokenizer: Tokenizer, directory: str | Path) -> Path:
    """Encode `pairs` (source, target texts) into `directory` (made whole or not at all: another process may be
    writing the same one, and the first to finish wins)."""
    directory = Path(directory)
    if is_encoded(directory):
        return directory
    directory.parent.mkdir(parents=True, exist_ok=True)
    # os.mkdir applies the umask (mkdtemp's 0700 would keep the workers of another user or uid out); the name is
    # this writer's own, so two processes encoding the same corpus never share a folder
    tmp = directory.parent / f".{directory.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        sides = {"src": ([], [np.zeros(1, np.int64)]), "tgt": ([], [np.zeros(1, np.int64)])}
        for start in range(0, len(pairs), CHUNK_PAIRS):
            chunk = pairs[start : start + CHUNK_PAIRS]
            for side, texts in (("src", [s for s, _ in chunk]), ("tgt", [t for _, t in chunk])):
                ids, offsets = sides[side]
                encoded = tokenizer.encode(texts)
                lengths = np.fromiter((len(e) for e in encoded), np.int64, len(encoded))
                ids.append(np.fromiter((i for e in encoded for i in e), np.int32, int(lengths.sum())))
                offsets.append(offsets[-1][-1] + np.cumsum(lengths))
        for side, (ids, offsets) in sides.items():
            np.save(tmp / f"{side}_ids.npy", np.concatenate(ids) if ids else np.zeros(0, np.int32))
            np.save(tmp / f"{side}_offsets.npy", np.concatenate(offsets))
        try:
            os.rename(tmp, directory)
        except OSError:  # another process finished first: its arrays are the same
            if not is_encoded(directory):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return directory


def is_encoded(directory: str | Path) -> bool:
    return all((Path(directory) / f"{name}.npy").is_file() for name in _FILES)


class EncodedPairs(Sequence):
    """The token-id pairs of `write_encoded`'s directory, memory-mapped: `pairs[i]` is (source ids, target ids) as
    lists, as `encode_pairs` gives them; `rows` selects some pairs (e.g. those that fit `max_len`)."""

    def __init__(self, directory: str | Path, rows: np.ndarray | None = None):
        self.directory = Path(directory)
        self._arrays = {name: np.load(self.directory / f"{name}.npy", mmap_mode="r") for name in _FILES}
        self.rows = rows if rows is not None else np.arange(len(self._arrays["src_offsets"]) - 1)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> tuple[list[int], list[int]]:
        row = int(self.rows[i])
        return self._side("src", row), self._side("tgt", row)

    def _side(self, side: str, row: int) -> list[int]:
        offsets = self._arrays[f"{side}_offsets"]
        return self._arrays[f"{side}_ids"][offsets[row] : offsets[row + 1]].tolist()

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """Token counts (no BOS/EOS) of each selected pair's source and target."""
        src, tgt = (np.diff(self._arrays[f"{side}_offsets"]) for side in ("src", "tgt"))
        return src[self.rows], tgt[self.rows]

    def select(self, rows: Iterable[int] | np.ndarray) -> EncodedPairs:
        return EncodedPairs(self.directory, self.rows[np.asarray(rows, dtype=np.int64)])
