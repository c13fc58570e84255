#!/usr/bin/env bash
# Start (or restart) the MLflow tracking server on the Ray head node; cluster.yaml and
# clusters/onprem.yaml run it from head_start_ray_commands.
#
#   MTCORE_MLFLOW_HOST       interface to bind (default 0.0.0.0: the worker nodes' rank-0 loggers must reach it;
#                            the cluster's firewall/security group admits only SSH from outside, see README)
#   MTCORE_MLFLOW_PORT       default 5000
#   MTCORE_MLFLOW_DIR        the store on the head's disk (default ~/mlflow): mlflow.db, server.log, server.pid
#   MTCORE_MLFLOW_ARTIFACTS  artifact root (default $MTCORE_MLFLOW_DIR/artifacts; or s3://bucket/prefix)
#   MTCORE_MLFLOW_WORKERS    server processes (default 2)
#
# The server runs in its own process group, recorded in server.pid, so that a restart
# stops exactly this server and nothing else.
set -euo pipefail

host="${MTCORE_MLFLOW_HOST:-0.0.0.0}"
port="${MTCORE_MLFLOW_PORT:-5000}"
dir="${MTCORE_MLFLOW_DIR:-$HOME/mlflow}"
artifacts="${MTCORE_MLFLOW_ARTIFACTS:-$dir/artifacts}"
mkdir -p "$dir"

if [ -f "$dir/server.pid" ]; then
  old="$(cat "$dir/server.pid")"
  if kill -0 "$old" 2>/dev/null; then
    kill -TERM -- "-$old" 2>/dev/null || kill -TERM "$old" 2>/dev/null || true
    for _ in $(seq 20); do kill -0 "$old" 2>/dev/null || break; sleep 0.5; done
  fi
  rm -f "$dir/server.pid"
fi

setsid mlflow server --host "$host" --port "$port" --workers "${MTCORE_MLFLOW_WORKERS:-2}" \
  --backend-store-uri "sqlite:///$dir/mlflow.db" --artifacts-destination "$artifacts" \
  >"$dir/server.log" 2>&1 </dev/null &
echo $! >"$dir/server.pid"

# Wait until it answers, so that the first job does not fall back to a local store.
probe_host="$host"; [ "$probe_host" = "0.0.0.0" ] && probe_host=127.0.0.1
for _ in $(seq 120); do
  if python -c "import urllib.request,sys; urllib.request.urlopen('http://$probe_host:$port/health', timeout=2)" 2>/dev/null; then
    echo "MLflow tracking server on $host:$port (store $dir, artifacts $artifacts, pid $(cat "$dir/server.pid"))"
    exit 0
  fi
  kill -0 "$(cat "$dir/server.pid")" 2>/dev/null || break
  sleep 0.5
done
echo "error: MLflow server did not start; see $dir/server.log" >&2
tail -20 "$dir/server.log" >&2 || true
exit 1
