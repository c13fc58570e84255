#!/usr/bin/env bash
# Start the Ray head node of an mtcore cluster (head_start_ray_commands of cluster.yaml and
# clusters/onprem.yaml): the MLflow tracking server first, then `ray start --head` with token
# authentication and MLFLOW_TRACKING_URI (and the MLflow credentials, see mlflow_auth.sh) in the
# environment every job and worker inherits.
# Extra arguments go to `ray start` (e.g. --autoscaling-config=~/ray_bootstrap_config.yaml).
#
#   RAY_PORT            GCS port (default 6379)
#   MTCORE_HOME         where jobs write runs (cleaned corpora, checkpoints); on a cluster with more
#                       than one node it must be a filesystem shared by all nodes (e.g. EFS/NFS).
#                       Default: the project's runs/ on the head (where a driver in ~/mtcore wrote them)
#   MTCORE_MLFLOW_*     see start_mlflow.sh
#   MTCORE_CLUSTER_ENV  the file job.sh reads these settings from (default ~/.mtcore/cluster.env; cluster_env.sh)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# Token authentication: on in every process of the cluster; the token is ~/.ray/auth_token
# (copied to every node by file_mounts) unless RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH say otherwise.
export RAY_AUTH_MODE=token
if [ -z "${RAY_AUTH_TOKEN:-}" ] && [ ! -s "${RAY_AUTH_TOKEN_PATH:-$HOME/.ray/auth_token}" ]; then
  echo "error: token authentication is on but there is no token; run 'ray get-auth-token --generate' on your machine before 'ray up'" >&2
  exit 1
fi

source "$here/mlflow_auth.sh"  # MLflow credentials: the server's admin user, and every job's client
bash "$here/start_mlflow.sh"
mlflow_host="${MTCORE_MLFLOW_HOST:-0.0.0.0}"
if [ "$mlflow_host" = "0.0.0.0" ]; then  # reachable from every node at the head's address
  mlflow_host="$(python -c 'import ray.util; print(ray.util.get_node_ip_address())')"
fi
export MLFLOW_TRACKING_URI="http://$mlflow_host:${MTCORE_MLFLOW_PORT:-5000}"
# Absolute: jobs and job.sh's drivers read it from other working directories.
MTCORE_HOME="${MTCORE_HOME:-$(cd "$here/../.." && pwd)/runs}"
case "$MTCORE_HOME" in /*) ;; *) MTCORE_HOME="$PWD/$MTCORE_HOME" ;; esac
export MTCORE_HOME
# A driver started by hand on the head (job.sh) gets what this environment gives every `ray job submit` job.
source "$here/cluster_env.sh"
write_cluster_env
# Each machine of clusters/onprem.yaml builds its venv with its own python3: Ray refuses a node or driver whose
# Python differs from the head's even in the patch version (3.11.4 vs 3.11.9); the minor version must match.
export RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL=minor
ulimit -n 65536 2>/dev/null || true
# The dashboard (and the Jobs API behind `ray job submit`) listens on the head's loopback only:
# reach it with `ray dashboard cluster.yaml`, an SSH tunnel.
exec ray start --head --port="${RAY_PORT:-6379}" --dashboard-host=127.0.0.1 "$@"
