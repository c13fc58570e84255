"""Bring a checkpoint logged to MLflow back to a local directory (for export, translation, BT).

`runs:/RUN_ID` alone means the run's `best_checkpoint` artifact (what `finish_run` logs);
`runs:/RUN_ID/PATH` and `models:/NAME/VERSION` are downloaded as given and searched for a
checkpoint directory (config.json next to spm.model).
"""

from __future__ import annotations

import contextlib
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

from mtcore.errors import MtcoreError

BEST = "best_checkpoint"


class FetchError(MtcoreError, ValueError):
    """No such run, model, version or artifact: the user's URI, said in one line (ValueError for older callers)."""


def download_checkpoint(uri: str, dest: str | Path | None = None) -> Path:
    """The checkpoint directory inside `uri`'s artifacts, downloaded under `dest` (else MLflow's own temporary folder,
    which nothing removes: prefer `fetched`)."""
    import mlflow

    from mtcore import tracking

    if re.fullmatch(r"runs:/[^/]+/?", uri):
        uri = f"{uri.rstrip('/')}/{BEST}"
    store = tracking.tracking_uri()
    db = Path(store.removeprefix("sqlite:///")) if store.startswith("sqlite:///") else None
    if db is not None and not db.is_file():  # opening it would leave an empty store behind a read-only command
        raise FetchError(f"{uri}: no MLflow store at {db}; run where you trained, or pass --home DIR (or set "
                         f"MTCORE_HOME / MLFLOW_TRACKING_URI) to the workspace that holds the run")
    mlflow.set_tracking_uri(store)
    try:
        local = Path(mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=str(dest) if dest else None))
    except Exception as err:  # MlflowException, OSError: the message names the run or path
        run = re.fullmatch(r"(runs:/[^/]+)/translator/?", uri)
        if run is None:
            raise FetchError(f"{uri}: cannot download from {db or store} ({' '.join(str(err).split())[:200]}); is "
                             f"this the workspace that holds the run? (--home DIR, MTCORE_HOME, MLFLOW_TRACKING_URI)") from None
        # a run logged without its pyfunc model (job.log_model: false, the back-translation job's reverse
        # models) still has its checkpoint, which is what the translator model wraps
        return download_checkpoint(run.group(1), dest)
    found = sorted(p.parent for p in local.rglob("spm.model") if (p.parent / "config.json").is_file())
    if not found:
        raise FetchError(f"{uri}: no mtcore checkpoint (config.json next to spm.model) inside")
    return found[0]


@contextlib.contextmanager
def fetched() -> Iterator:
    """A resolver `uri -> checkpoint directory` whose downloads are removed when the block ends (the model is read by
    then: a translation or an export must not leave a model-sized copy in /tmp per call)."""
    with tempfile.TemporaryDirectory(prefix="mtcore-fetch-") as tmp:
        yield lambda uri: download_checkpoint(uri, tmp)
