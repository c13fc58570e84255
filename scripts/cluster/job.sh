#!/usr/bin/env bash
# Run an mtcore entry point as a driver on the head node of a cluster started by start_head.sh:
#   ray exec cluster.yaml '~/mtcore/scripts/cluster/job.sh python pipelines/backtranslate.py'
# `ray exec` gives a plain login shell: this takes the settings the head's `ray start` had (MTCORE_HOME,
# MLFLOW_TRACKING_URI, ...: the file start_head.sh writes, see cluster_env.sh), finds the cluster (RAY_ADDRESS,
# default auto) and the MLflow server's credentials (mlflow_auth.sh). Variables set already win, and so do
# MTCORE_MLFLOW_HOST/PORT (as for start_head.sh); without the file, MLflow is at the head's cluster address,
# which the workers on other nodes reach too.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

mlflow_uri() {  # the head's MLflow server from MTCORE_MLFLOW_HOST/PORT, as start_head.sh derives it
  local host="${MTCORE_MLFLOW_HOST:-0.0.0.0}"
  if [ "$host" = "0.0.0.0" ]; then
    host="$(python -c 'import ray.util; print(ray.util.get_node_ip_address())')"
  fi
  export MLFLOW_TRACKING_URI="http://$host:${MTCORE_MLFLOW_PORT:-5000}"
}

if [ -z "${MLFLOW_TRACKING_URI:-}" ] && [ -n "${MTCORE_MLFLOW_HOST:-}${MTCORE_MLFLOW_PORT:-}" ]; then
  mlflow_uri  # named here: before the file's
fi
source scripts/cluster/cluster_env.sh
if [ -f "$MTCORE_CLUSTER_ENV" ]; then
  source "$MTCORE_CLUSTER_ENV"
elif [ -z "${MTCORE_HOME:-}" ]; then
  echo "job.sh: no $MTCORE_CLUSTER_ENV (start_head.sh writes it on the head): MTCORE_HOME is $PWD/runs" >&2
fi
if [ -z "${MLFLOW_TRACKING_URI:-}" ]; then
  mlflow_uri
fi
export RAY_AUTH_MODE=token
export RAY_ADDRESS="${RAY_ADDRESS:-auto}"
export RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL=minor  # as start_head.sh
source scripts/cluster/mlflow_auth.sh  # the server's credentials, from the Ray token
exec "$@"
