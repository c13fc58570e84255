"""`python -m mtcore.export`: the code lives in `mtcore.nmt.export`; an MLflow `runs:/…` reference is
downloaded by the tracking layer (the only user of mlflow) before the export sees it."""

import sys

from mtcore.nmt.export import main
from mtcore.tracking.fetch import download_checkpoint

if __name__ == "__main__":
    sys.exit(main(resolve=download_checkpoint))
