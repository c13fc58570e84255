"""What a stage's reuse check costs: `mtcore.runs.content_hash` beside a SHA-256 of every byte (the naive anchor).

    python benchmarks/fingerprint_cost.py [--sizes-mib 64 1536] [--repeat 3]

Files: the embedded corpus and random files of the given sizes (written to a temporary folder). Up to 1 GiB a file
is hashed whole, so the two are about equal; beyond it `content_hash` reads three 1 MiB samples.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path

from mtcore.data.paths import RAW_PARALLEL
from mtcore.runs import content_hash


def sha256_all(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(8 * 1024**2):
            h.update(chunk)
    return h.hexdigest()


def best_of(fn, path: Path, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(path)
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes-mib", type=int, nargs="+", default=[64, 1536])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f}; best of {args.repeat}, warm page cache")
    print(f"{'file':<44}{'content_hash':>14}{'SHA-256 all':>14}{'ratio':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        files = [RAW_PARALLEL] if RAW_PARALLEL.exists() else []
        for mib in args.sizes_mib:
            path = Path(tmp) / f"random-{mib}MiB.bin"
            with path.open("wb") as f:
                for _ in range(mib):
                    f.write(os.urandom(1024**2))
            files.append(path)
        for path in files:
            ours, naive = best_of(content_hash, path, args.repeat), best_of(sha256_all, path, args.repeat)
            label = f"{path.name} ({path.stat().st_size / 1024**2:,.1f} MiB)"
            print(f"{label:<44}{1000 * ours:>11.1f} ms{1000 * naive:>11.1f} ms{ours / naive:>8.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
