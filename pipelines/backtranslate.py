"""Back-translation augmentation on Ray Data: the platform's main data job.

Its options and examples: run it with --help. The code is mtcore/cli/backtranslate.py, which the
console script also runs, as `mtcore backtranslate`.
"""

import sys

from mtcore.cli.backtranslate import build_parser, main  # noqa: F401 - the tests parse documented commands with them

if __name__ == "__main__":
    sys.exit(main())
