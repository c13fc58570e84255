"""`python -m mtcore.report`: kept for the README's commands; the code lives in `mtcore.tracking.report`."""

import sys

from mtcore.tracking.report import main

if __name__ == "__main__":
    sys.exit(main())
