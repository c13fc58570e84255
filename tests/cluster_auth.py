"""The MLflow credentials a cluster's nodes and jobs use, as scripts/cluster/mlflow_auth.sh derives them."""

from __future__ import annotations

import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "cluster" / "mlflow_auth.sh"


def mlflow_credentials(env: dict[str, str]) -> dict[str, str]:
    """MLFLOW_TRACKING_USERNAME/PASSWORD from the Ray token in `env` (RAY_AUTH_TOKEN or the token file)."""
    out = subprocess.run(
        ["bash", "-c", f'source {SCRIPT} && printf "%s\\n%s" "$MLFLOW_TRACKING_USERNAME" "$MLFLOW_TRACKING_PASSWORD"'],
        env=env, capture_output=True, text=True, check=True,
    ).stdout.split("\n")
    assert len(out) == 2 and all(out), out
    return {"MLFLOW_TRACKING_USERNAME": out[0], "MLFLOW_TRACKING_PASSWORD": out[1]}
