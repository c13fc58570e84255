"""Build the embedded English–Vietnamese corpus in data/ from Debian packages.

    python pipelines/build_corpus.py [--packages data/packages.txt] [--output data/] [--cache DIR] [--seed N]

Needs a Debian system with apt-get and dpkg-deb; downloads (~1 GB, cached)
and unpacks packages without installing them. Logic: mtcore/data/corpus_build.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mtcore.console import add_common_options
from mtcore.errors import entry_point
from mtcore.data.corpus_build import BuildConfig, build, summary_rows


def build_parser() -> argparse.ArgumentParser:
    """The command line (the tests parse every documented command with it)."""
    defaults = BuildConfig()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--packages", type=Path, default=defaults.packages_file, help="package list, one a line")
    parser.add_argument("--output", type=Path, default=defaults.output, help="where data files go")
    parser.add_argument("--cache", type=Path, default=defaults.cache, help="where .deb files are kept")
    parser.add_argument("--seed", type=int, default=defaults.seed, help="seed for choosing held-out catalogs")
    add_common_options(parser)
    return parser


def parse_args(argv: list[str] | None = None) -> tuple[BuildConfig, bool]:
    args = build_parser().parse_args(argv)
    config = BuildConfig(packages_file=args.packages, output=args.output, cache=args.cache, seed=args.seed)
    return config, args.verbosity < 0  # -q: no per-package lines


@entry_point
def main(argv: list[str] | None = None) -> None:
    config, quiet = parse_args(argv)
    result = build(config, progress=(lambda _: None) if quiet else print)
    skipped = [p for p in result.packages if p.status != "used"]
    print()
    for label, value in summary_rows(result):
        print(f"{label:26s} {value}")
    if skipped:
        print("skipped:", ", ".join(f"{p.name} ({p.reason.strip()[:50]})" for p in skipped))
    print(f"written to {config.output} (provenance: {config.output / 'SOURCES.md'})")


if __name__ == "__main__":
    sys.exit(main())
