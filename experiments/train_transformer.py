"""Train the mtcore Transformer with Ray Train DDP and track it in MLflow.

Its options and examples: run it with --help. The code is mtcore/cli/train.py, which the
console script also runs, as `mtcore train`.
"""

import sys

from mtcore.cli.train import main, parse_args  # noqa: F401 - the tests parse documented commands with them

if __name__ == "__main__":
    sys.exit(main())
