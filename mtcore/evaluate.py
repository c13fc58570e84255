"""`python -m mtcore.evaluate`: the code lives in `mtcore.nmt.evaluate`; an MLflow `runs:/…` model is downloaded
by the tracking layer (the only user of mlflow) and removed once loaded."""

import sys

from mtcore.nmt.evaluate import main as evaluate_main
from mtcore.tracking.fetch import fetched


def main(argv: list[str] | None = None) -> int:
    with fetched() as resolve:
        return evaluate_main(argv, resolve=resolve)


if __name__ == "__main__":
    sys.exit(main())
