"""Clean a parallel corpus on Ray Data: DIR/kept/, DIR/rejects/ (reason-coded) and DIR/report.json.

Its options and examples: run it with --help. The code is mtcore/cli/clean.py, which the
console script also runs, as `mtcore clean`.
"""

import sys

from mtcore.cli.clean import build_parser, main  # noqa: F401 - the tests parse documented commands with them

if __name__ == "__main__":
    sys.exit(main())
