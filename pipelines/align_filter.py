"""Drop misaligned pairs by bilingual sentence-embedding similarity, on Ray Data.

Its options and examples: run it with --help. The code is mtcore/cli/align_filter.py, which the
console script also runs, as `mtcore align-filter`.
"""

import sys

from mtcore.cli.align_filter import build_parser, main  # noqa: F401 - the tests parse documented commands with them

if __name__ == "__main__":
    sys.exit(main())
