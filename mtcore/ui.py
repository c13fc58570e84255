"""`python -m mtcore.ui`: kept for the README's commands; the code lives in `mtcore.tracking.ui`."""

import sys

from mtcore.tracking.ui import main

if __name__ == "__main__":
    sys.exit(main())
