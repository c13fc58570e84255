#!/usr/bin/env bash
# Run an mtcore entry point as a driver on the head node of a cluster started by start_head.sh:
#   ray exec cluster.yaml '~/mtcore/scripts/cluster/job.sh python pipelines/backtranslate.py'
# `ray exec` gives a plain login shell: this finds the cluster (RAY_ADDRESS, default auto) and its
# MLflow server (MLFLOW_TRACKING_URI at the head's cluster address, which the workers on other nodes
# reach too) and its credentials (mlflow_auth.sh), unless they are set already; MTCORE_MLFLOW_HOST/PORT as
# for start_head.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export RAY_AUTH_MODE=token
export RAY_ADDRESS="${RAY_ADDRESS:-auto}"
if [ -z "${MLFLOW_TRACKING_URI:-}" ]; then
  host="${MTCORE_MLFLOW_HOST:-0.0.0.0}"
  if [ "$host" = "0.0.0.0" ]; then
    host="$(python -c 'import ray.util; print(ray.util.get_node_ip_address())')"
  fi
  export MLFLOW_TRACKING_URI="http://$host:${MTCORE_MLFLOW_PORT:-5000}"
fi
source scripts/cluster/mlflow_auth.sh  # the server's credentials, from the Ray token
exec "$@"
