"""Where the embedded default data and the default stores live, in one place."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DATA_DIR = REPO_ROOT / "data"

RAW_PARALLEL = DATA_DIR / "raw" / "parallel.parquet"
DEV = DATA_DIR / "dev.parquet"
TEST = DATA_DIR / "test.parquet"
NEAR_MISS_DEV = DATA_DIR / "near_miss_dev.parquet"  # labelled near misses from the held-out splits (issue 21)
MONO_VI = DATA_DIR / "mono" / "vi.parquet"

# Work products (cleaned corpora, checkpoints, MLflow store) go to the workspace, `mtcore.runs.home()`,
# asked for when needed: `--home` or $MTCORE_HOME set after import still counts.
