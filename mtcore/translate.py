"""`python -m mtcore.translate`: the code lives in `mtcore.nmt.translate`; an MLflow `runs:/…` model is downloaded
by the tracking layer (the only user of mlflow) and removed once loaded."""

import sys

from mtcore.nmt.translate import build_parser  # noqa: F401  (the tests parse documented commands)
from mtcore.nmt.translate import main as translate_main
from mtcore.tracking.fetch import fetched


def main(argv: list[str] | None = None) -> int:
    with fetched() as resolve:
        return translate_main(argv, resolve=resolve)


if __name__ == "__main__":
    sys.exit(main())
