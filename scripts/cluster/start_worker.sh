#!/usr/bin/env bash
# Start a Ray worker node of an mtcore cluster (worker_start_ray_commands): join the head at
# $RAY_HEAD_IP (set by the cluster launcher) with token authentication on.
# Extra arguments go to `ray start`.
set -euo pipefail
: "${RAY_HEAD_IP:?RAY_HEAD_IP is not set (the cluster launcher sets it)}"
export RAY_AUTH_MODE=token
export RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL=minor  # as start_head.sh: the Python patch version may differ
export MLFLOW_TRACKING_URI="http://$RAY_HEAD_IP:${MTCORE_MLFLOW_PORT:-5000}"
source "$(dirname "${BASH_SOURCE[0]}")/mlflow_auth.sh"  # rank 0 on this node logs to the head's server
ulimit -n 65536 2>/dev/null || true
exec ray start --address="$RAY_HEAD_IP:${RAY_PORT:-6379}" "$@"
