"""MLflow tracking: where the store is, run naming and tags, and never crashing a job over it.

The default store is a SQLite file under `runs/` (or `$MTCORE_HOME`); a tracking
server URL in `MLFLOW_TRACKING_URI` takes over on a cluster. If that server cannot
be reached, jobs warn once and record to the local fallback store instead of
failing: losing a training run because a dashboard is down is the worse outcome.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from mtcore.data.paths import REPO_ROOT
from mtcore.runs import content_hash, home
from mtcore.errors import MtcoreError, on_failure

log = logging.getLogger(__name__)

# MLflow's default HTTP retries back off for minutes (7 retries, factor 2: a dead server cost 249 s);
# two quick retries bound every client call. The per-request timeout stays MLflow's: artifact uploads are large.
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")


class TrackingError(MtcoreError):
    """A tracking store or server that cannot be used; the message names it."""

MAX_PARAM_CHARS = 500  # MLflow rejects longer parameter values


def local_store_uri() -> str:
    home().mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{(home() / 'mlflow.db').resolve()}"


def _server_reachable(uri: str, timeout: float = 3.0) -> bool:
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def as_store_uri(value: str) -> str:
    """A store given as a plain path (`--store runs/mlflow.db`, `MLFLOW_TRACKING_URI=/x/mlflow.db`) as the SQLite URI
    it means; MLflow would read a path as its file store, which is in maintenance mode and fails with a traceback."""
    if not value or "://" in value or value.startswith(("sqlite:", "databricks")):
        return value
    path = Path(value).expanduser()
    if path.suffix == ".db" or path.is_file():
        return f"sqlite:///{path.resolve()}"
    raise TrackingError(f"{value}: not a tracking store; pass sqlite:///PATH/mlflow.db, a .db file or http://HOST:PORT "
                        f"(MLflow's folder store is not supported)")


def check_sqlite_store(uri: str, *, must_exist: bool) -> None:
    """An `sqlite:` store is an SQLite file (MLflow would fail deep inside SQLAlchemy), and exists where a reader
    needs its runs (a mistyped path would otherwise be created empty and read as "no runs")."""
    if not uri.startswith("sqlite:///"):
        return
    db = Path(uri.removeprefix("sqlite:///"))
    if not db.exists():
        if must_exist:
            raise TrackingError(f"{uri}: no such MLflow store ({db} does not exist); check --store or MLFLOW_TRACKING_URI")
        return
    if db.is_dir() or db.stat().st_size and _first_bytes(db, 16) != b"SQLite format 3\x00":
        raise TrackingError(f"{uri}: {db} is not an SQLite database; point --store or MLFLOW_TRACKING_URI at an MLflow store")


def _first_bytes(path: Path, n: int) -> bytes:
    with path.open("rb") as f:
        return f.read(n)


def require_server(uri: str, attempts: int = 2, timeout: float = 3.0) -> None:
    """A short probe (and one retry) before a tool that needs this server talks to it."""
    if not uri.startswith(("http://", "https://")):
        return
    for attempt in range(attempts):
        if _server_reachable(uri, timeout):
            check_credentials(uri, timeout)
            return
        if attempt + 1 < attempts:
            time.sleep(1.0)
    raise TrackingError(f"{uri}: MLflow tracking server does not answer (tried {attempts}x, {timeout:g} s each); "
                        "start it, check the URL, or use a local store (sqlite:///PATH)")


_credentials_ok: set[str] = set()


def check_credentials(uri: str, timeout: float = 3.0) -> None:
    """One authenticated request, so that a server that refuses us (MLflow's basic-auth app, a proxy) fails
    the job in a line before any work, rather than as an HTTP 401 traceback from deep inside MLflow."""
    if uri in _credentials_ok or not uri.startswith(("http://", "https://")):
        return
    request = urllib.request.Request(uri.rstrip("/") + "/api/2.0/mlflow/experiments/search?max_results=1")
    user, password = os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if user and password:
        request.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    elif os.environ.get("MLFLOW_TRACKING_TOKEN"):
        request.add_header("Authorization", "Bearer " + os.environ["MLFLOW_TRACKING_TOKEN"])
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            pass
    except urllib.error.HTTPError as err:
        if err.code in (401, 403):
            who = f"user {user!r}" if user and password else "a request without credentials"
            raise TrackingError(
                f"{uri}: the MLflow server refused {who} (HTTP {err.code}); set MLFLOW_TRACKING_USERNAME and "
                "MLFLOW_TRACKING_PASSWORD (on an mtcore cluster: source scripts/cluster/mlflow_auth.sh, as "
                "scripts/cluster/job.sh does)") from None
    except (urllib.error.URLError, OSError, ValueError):
        return  # unreachable: the callers' reachability probes decide what that means
    _credentials_ok.add(uri)


_SAFE_VALUE = re.compile(r"[\w .,:/@+=-]*")


def find_runs(client, experiment_id: str, key: str, value: str, max_results: int = 1000) -> list:
    """Runs whose tag `key` equals `value`. Values from user paths (quotes, backslashes) are never
    pasted into a filter string: they are compared here, over the experiment's runs."""
    if _SAFE_VALUE.fullmatch(value):
        return list(client.search_runs([experiment_id], filter_string=f"tags.`{key}` = '{value}'", max_results=max_results))
    found, token = [], None
    while True:
        page = client.search_runs([experiment_id], max_results=1000, page_token=token)
        found += [r for r in page if r.data.tags.get(key) == value]
        token = page.token
        if not token or len(found) >= max_results:
            return found[:max_results]


# Runs this process opened with the client API and has not ended: an entry point that fails ends them FAILED.
_open_runs: dict[str, str] = {}  # run id -> tracking URI


def opened(run_id: str, uri: str) -> None:
    _open_runs[run_id] = uri


def closed(run_id: str) -> None:
    _open_runs.pop(run_id, None)


@on_failure
def _end_runs_failed() -> str | None:
    """FAILED, or KILLED when the user pressed Ctrl-C; says so if it ended any."""
    from mtcore.errors import interrupted

    mlflow = sys.modules.get("mlflow")
    if mlflow is None:
        return None
    status = "KILLED" if interrupted() else "FAILED"
    ended = 0
    if mlflow.active_run() is not None:
        mlflow.end_run(status=status)
        ended += 1
    for run_id, uri in list(_open_runs.items()):
        client = mlflow.MlflowClient(tracking_uri=uri)
        if client.get_run(run_id).info.status == "RUNNING":
            client.set_terminated(run_id, status=status)
            ended += 1
        closed(run_id)
    return f"the MLflow run{'s' if ended > 1 else ''} it had open {'are' if ended > 1 else 'is'} marked {status}" if ended else None


_warned = False


def tracking_uri() -> str:
    """`MLFLOW_TRACKING_URI` when usable, else the local SQLite store (warning once if a server was down)."""
    global _warned
    uri = as_store_uri(os.environ.get("MLFLOW_TRACKING_URI", "").strip())
    if not uri:
        return local_store_uri()
    if uri.startswith(("http://", "https://")) and not _server_reachable(uri):
        fallback = local_store_uri()
        if not _warned:  # one log line (a warnings.warn showed as two: its source line too)
            log.warning("MLflow tracking server %s is unreachable; recording this run to %s instead", uri, fallback)
            _warned = True
        return fallback
    check_credentials(uri)  # reachable but refusing us is a setting to fix, not a reason to record elsewhere
    return uri


def browse_hint() -> str:
    """Where to look at the runs just recorded: the tracking server's page, or the UI command for this workspace
    (with --home when it is not the default one, which a plain `python -m mtcore.ui` would show instead)."""
    uri = tracking_uri()
    if uri.startswith(("http://", "https://")):
        return f"open {uri}"
    workspace = home()
    flag = "" if workspace == (Path.cwd() / "runs").absolute() else f" --home {workspace}"
    return f"python -m mtcore.ui{flag}  (then http://127.0.0.1:5000)"


def artifact_root(store_uri: str) -> str | None:
    """Where a SQLite store keeps artifacts: `mlartifacts/` next to the database file (None for other stores)."""
    if not store_uri.startswith("sqlite:"):
        return None
    return (Path(store_uri.removeprefix("sqlite:///")).parent / "mlartifacts").resolve().as_uri()


def setup(experiment: str):
    """Point MLflow at the store and select (creating if needed) one experiment per entry point."""
    import mlflow

    uri = tracking_uri()
    mlflow.set_tracking_uri(uri)
    artifacts = artifact_root(uri)  # next to the SQLite file, not in the current directory
    if artifacts and mlflow.get_experiment_by_name(experiment) is None:
        mlflow.create_experiment(experiment, artifact_location=artifacts)
    exp = mlflow.set_experiment(experiment)
    if needs_ui_tags(exp.tags):
        mark_model_training(mlflow.MlflowClient(), exp.experiment_id)
    return mlflow


# MLflow 3's UI opens an experiment as a GenAI (traces) page unless it is marked as model training;
# marked, it opens on the runs table with params and metrics.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"

# The runs table as a leaderboard: best test BLEU first, the columns an MT user compares. The MLflow UI keeps
# a user's own column choice in the browser; its *shared views* are the one server-side way to set them: the
# UI reads the view from the experiment tag `mlflow.sharedViewState.KEY` when its URL carries
# `?viewStateShareKey=KEY`. `mtcore ui` prints that URL.
SHARED_VIEW_TAG = "mlflow.sharedViewState."
LEADERBOARD_METRICS = ("test/bleu", "test/chrf", "dev/bleu", "model/params", "train/tokens_per_s")
LEADERBOARD_PARAMS = ("model.arch", "model.d_model", "model.layers", "model.heads", "train.time_budget_min")


def leaderboard_view() -> tuple[str, str]:
    """(share key, view state JSON) of the leaderboard view; the key changes when the view does."""
    import json

    view = {
        "orderByKey": "metrics.`test/bleu`", "orderByAsc": False,
        "selectedColumns": ["attributes.`Run Name`", *(f"metrics.`{m}`" for m in LEADERBOARD_METRICS),
                            *(f"params.`{p}`" for p in LEADERBOARD_PARAMS), "attributes.`Duration`"],
    }
    body = json.dumps(view, separators=(",", ":"))
    return "mtcore-leaderboard-" + hashlib.sha256(body.encode()).hexdigest()[:12], body


def needs_ui_tags(tags: dict[str, str]) -> bool:
    """Whether an experiment with these tags still lacks a kind or today's leaderboard view (a kind that
    someone set on purpose is left alone)."""
    return EXPERIMENT_KIND_TAG not in tags or SHARED_VIEW_TAG + leaderboard_view()[0] not in tags


def mark_model_training(client, experiment_id: str) -> None:
    """Tag an experiment so that the MLflow UI shows it as model training (runs, metrics, artifacts), with
    the leaderboard view available under its share key."""
    key, body = leaderboard_view()
    try:
        client.set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
        client.set_experiment_tag(experiment_id, SHARED_VIEW_TAG + key, body)
    except Exception as err:  # noqa: BLE001 - a display hint must never stop a job
        log.warning("could not tag experiment %s for the MLflow UI: %s", experiment_id, err)


def flatten(config: dict, prefix: str = "") -> dict[str, str]:
    """Nested config → `model.heads`-style params, each value cut to MLflow's limit."""
    flat: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if _named_items(value):  # a rule list [{LengthRatio: {...}}, ...]: one param per setting, not one cut string
            flat[f"{name}.order"] = ",".join(next(iter(item)) for item in value)[:MAX_PARAM_CHARS]
            seen: dict[str, int] = {}
            for item in value:
                (kind, settings), = item.items()
                seen[kind] = seen.get(kind, 0) + 1
                label = kind if seen[kind] == 1 else f"{kind}_{seen[kind]}"  # MLflow refuses `#` in a param name
                flat.update(flatten(settings if isinstance(settings, dict) else {"value": settings}, f"{name}.{label}."))
        elif isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = str(value)[:MAX_PARAM_CHARS]
    return flat


def _named_items(value) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) and len(v) == 1 for v in value)


def git_commit() -> str:
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        out = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        )
        return out.stdout.strip()
    return "unknown"


def data_version(path: str | Path) -> str:
    """A short content hash of a corpus file, directory or Moses prefix: runs on the same data share it.
    The stages' own fingerprint (`runs.content_hash`: milliseconds, however large the corpus)."""
    return content_hash(path)[:12]


# Tag names every entry point uses, so that runs of all of them filter and compare alike in MLflow.
TAG_ENTRY_POINT = "mtcore.entry_point"  # the script that made the run, e.g. "experiments/train_transformer.py"
TAG_GIT_COMMIT = "mtcore.git_commit"
TAG_DATA_VERSION = "mtcore.data_version"  # data_version() of the training (or input) corpus
TAG_BLEU_SIGNATURE = "sacrebleu.bleu_signature"
TAG_CHRF_SIGNATURE = "sacrebleu.chrf_signature"


def standard_tags(entry_point: str, data_path: str | Path | None = None, **extra: str) -> dict[str, str]:
    """Entry point, git commit and data version (when there is a corpus), plus `extra` as `mtcore.<key>` tags."""
    tags = {TAG_ENTRY_POINT: entry_point, TAG_GIT_COMMIT: git_commit()}
    if data_path is not None:
        tags[TAG_DATA_VERSION] = data_version(data_path)
    tags.update({f"mtcore.{k}": str(v) for k, v in extra.items()})
    return tags
