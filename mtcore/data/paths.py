"""Where the embedded default data and the default stores live, in one place."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DATA_DIR = REPO_ROOT / "data"

RAW_PARALLEL = DATA_DIR / "raw" / "parallel.parquet"
DEV = DATA_DIR / "dev.parquet"
TEST = DATA_DIR / "test.parquet"
NEAR_MISS_DEV = DATA_DIR / "near_miss_dev.parquet"  # labelled near misses from the held-out splits (issue 21)
OUTDATED_DEV = DATA_DIR / "outdated_dev.parquet"  # real outdated translations from the source catalogs (issue 21)
CJK_CATALOGS = DATA_DIR / "cjk_catalogs.parquet"  # correct zh/ja/ko catalog pairs: length weights of wide scripts
MONO_VI = DATA_DIR / "mono" / "vi.parquet"


def same_file(a: str | Path, b: str | Path) -> bool:
    """Two spellings of one path: `data/test.parquet` typed from the checkout is the embedded test set too."""
    return bool(a) and bool(b) and Path(a).resolve() == Path(b).resolve()


def embedded_heldout(path: str | Path) -> bool:
    """The embedded dev or test set (en-vi columns), however the path is written."""
    return any(same_file(path, split) for split in (DEV, TEST))

# Work products (cleaned corpora, checkpoints, MLflow store) go to the workspace, `mtcore.runs.home()`,
# asked for when needed: `--home` or $MTCORE_HOME set after import still counts.
