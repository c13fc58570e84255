"""`python -m mtcore.translate`: kept for the README's commands; the code lives in `mtcore.nmt.translate`."""

import sys

from mtcore.nmt.translate import main

if __name__ == "__main__":
    sys.exit(main())
