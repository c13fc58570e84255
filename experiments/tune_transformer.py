"""Search Transformer hyperparameters with Ray Tune; every trial is a Ray Train DDP run tracked in MLflow.

Its options and examples: run it with --help. The code is mtcore/cli/tune.py, which the
console script also runs, as `mtcore tune`.
"""

import sys

from mtcore.cli.tune import load_job, main, parse_args  # noqa: F401 - the tests parse documented commands with them

if __name__ == "__main__":
    sys.exit(main())
