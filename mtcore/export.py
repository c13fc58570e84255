"""`python -m mtcore.export` / `mtcore export`: the code lives in `mtcore.nmt.export`; an MLflow `runs:/…`
reference is downloaded by the tracking layer (the only user of mlflow) before the export sees it, and removed after."""

import sys

from mtcore.nmt.export import main as export_main
from mtcore.tracking.fetch import fetched


def main(argv: list[str] | None = None) -> int:
    with fetched() as resolve:
        return export_main(argv, resolve=resolve)


if __name__ == "__main__":
    sys.exit(main())
