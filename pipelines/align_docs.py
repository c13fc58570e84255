"""Align the sentences of two documents that translate each other (Vecalign-style, coarse to fine).

Its options and examples: run it with --help. The code is mtcore/cli/align_docs.py, which the
console script also runs, as `mtcore align-docs`.
"""

import sys

from mtcore.cli.align_docs import build_parser, main  # noqa: F401 - the tests parse documented commands with them

if __name__ == "__main__":
    sys.exit(main())
