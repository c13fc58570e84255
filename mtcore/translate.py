"""`python -m mtcore.translate`: kept for the README's commands; the code lives in `mtcore.nmt.translate`."""

import sys

from mtcore.nmt.translate import build_parser, main  # noqa: F401 - build_parser: the tests parse documented commands

if __name__ == "__main__":
    sys.exit(main())
