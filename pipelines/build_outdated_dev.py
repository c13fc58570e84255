"""Build the outdated-translation development set from the packages' own source catalogs.

    python pipelines/build_outdated_dev.py                    # → data/outdated_dev.parquet
    python pipelines/build_outdated_dev.py --packages data/packages.txt --cache CACHE --per-catalog 40 --share 0.17

Real near misses, not made ones: for every package of the embedded corpus, its source package's `vi.po`
files (`apt-get source --download-only`; needs a `deb-src` line in apt's sources) hold fuzzy entries whose
translation msgmerge kept from an earlier English (`#| msgid`). Where the English changed in content words,
the new English beside the old translation is a real outdated translation ("West Gate" with the translation
of "East Gate"); the same catalogs' translated entries are the correct pairs beside them. See
mtcore/alignment/devset.py (`build_outdated_dev`); used by benchmarks/align_quality.py. The built-in
encoder and pair classifier never train on its sentences.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from mtcore import checks
from mtcore.alignment.devset import outdated_dev_from_packages
from mtcore.console import add_common_options, progress_line
from mtcore.data.corpus import write_parquet
from mtcore.data.corpus_build import read_package_list
from mtcore.data.paths import DATA_DIR, OUTDATED_DEV
from mtcore.errors import entry_point


def build_parser() -> argparse.ArgumentParser:
    """The command line (the tests parse every documented command with it)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--packages", default=str(DATA_DIR / "packages.txt"), help="binary packages, one a line (default: %(default)s)")
    ap.add_argument("--cache", default="build/source-catalogs", help="where the source catalogs are unpacked (default: %(default)s)")
    ap.add_argument("--output", default=str(OUTDATED_DEV))
    ap.add_argument("--share", type=float, default=0.17, help="share of misaligned rows (default: %(default)s)")
    ap.add_argument("--per-catalog", type=int, default=40, help="outdated translations kept per catalog at most (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=0)
    add_common_options(ap)
    return ap


@entry_point
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    checks.open_share("--share", args.share)
    checks.at_least("--per-catalog", args.per_catalog, 1)
    checks.output_file("--output", args.output)
    dev, failed = outdated_dev_from_packages(read_package_list(Path(args.packages)), Path(args.cache), args.share,
                                             args.per_catalog, args.seed, progress=progress_line)
    write_parquet(dev, args.output)
    bad = [o for o, label in zip(dev["origin"].to_pylist(), dev["label"].to_pylist()) if label]
    print(f"{len(dev)} pairs, {len(bad)} outdated translations from {len(set(bad))} catalogs "
          f"({dict(Counter(o.split('/')[0] for o in bad).most_common(8))} ...) → {args.output}")
    if failed:
        print(f"{len(failed)} source packages not fetched (e.g. {next(iter(failed.items()))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
