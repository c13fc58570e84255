"""`python -m mtcore.evaluate`: kept for the README's commands; the code lives in `mtcore.nmt.evaluate`."""

import sys

from mtcore.nmt.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
