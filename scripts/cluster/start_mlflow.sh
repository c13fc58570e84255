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
#   MTCORE_MLFLOW_AUTH       basic-auth (default): every request needs MLFLOW_TRACKING_USERNAME/PASSWORD
#                            (mlflow_auth.sh derives them from the Ray token); none: no authentication
#
# The server runs in its own process group, recorded in server.pid, so that a restart
# stops exactly this server and nothing else.
set -euo pipefail

host="${MTCORE_MLFLOW_HOST:-0.0.0.0}"
port="${MTCORE_MLFLOW_PORT:-5000}"
dir="${MTCORE_MLFLOW_DIR:-$HOME/mlflow}"
artifacts="${MTCORE_MLFLOW_ARTIFACTS:-$dir/artifacts}"
mkdir -p "$dir"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

app=()
case "${MTCORE_MLFLOW_AUTH:-basic-auth}" in
  none) ;;
  basic-auth)
    source "$here/mlflow_auth.sh"
    if [ -z "${MLFLOW_TRACKING_PASSWORD:-}" ]; then
      echo "error: MLflow basic auth is on but there are no credentials: no Ray token (run 'ray get-auth-token --generate' before 'ray up') and no MLFLOW_TRACKING_USERNAME/PASSWORD; or set MTCORE_MLFLOW_AUTH=none" >&2
      exit 1
    fi
    # The users database and its settings live beside the store, readable by this user only; the admin
    # password reaches the server through its environment, never a file.
    (umask 077; cat >"$dir/basic_auth.ini" <<INI
[mlflow]
default_permission = NO_PERMISSIONS
database_uri = sqlite:///$dir/basic_auth.db
admin_username = $MLFLOW_TRACKING_USERNAME
authorization_function = mlflow.server.auth:authenticate_request_basic_auth
INI
    )
    # MLflow creates the admin user only once; after the Ray token was rotated, set the new password.
    if [ -f "$dir/basic_auth.db" ]; then
      python - "$dir/basic_auth.db" <<'PY'
import os, sys
from mlflow.server.auth.sqlalchemy_store import SqlAlchemyStore
store = SqlAlchemyStore()
store.init_db(f"sqlite:///{sys.argv[1]}")
user = os.environ["MLFLOW_TRACKING_USERNAME"]
if store.has_user(user):
    store.update_user(user, password=os.environ["MLFLOW_TRACKING_PASSWORD"], is_admin=True)
else:
    store.create_user(user, os.environ["MLFLOW_TRACKING_PASSWORD"], is_admin=True)
PY
    fi
    export MLFLOW_AUTH_CONFIG_PATH="$dir/basic_auth.ini" MLFLOW_AUTH_ADMIN_PASSWORD="$MLFLOW_TRACKING_PASSWORD"
    # The UI's CSRF key: new at each start (shared by this server's workers through the environment).
    MLFLOW_FLASK_SERVER_SECRET_KEY="${MLFLOW_FLASK_SERVER_SECRET_KEY:-$(python -c 'import secrets; print(secrets.token_hex(32))')}"
    export MLFLOW_FLASK_SERVER_SECRET_KEY
    app=(--app-name basic-auth)
    ;;
  *) echo "error: MTCORE_MLFLOW_AUTH=${MTCORE_MLFLOW_AUTH}: expected basic-auth or none" >&2; exit 1 ;;
esac

if [ -f "$dir/server.pid" ]; then
  old="$(cat "$dir/server.pid")"
  if kill -0 "$old" 2>/dev/null; then
    kill -TERM -- "-$old" 2>/dev/null || kill -TERM "$old" 2>/dev/null || true
    for _ in $(seq 20); do kill -0 "$old" 2>/dev/null || break; sleep 0.5; done
  fi
  rm -f "$dir/server.pid"
fi

setsid mlflow server "${app[@]}" --host "$host" --port "$port" --workers "${MTCORE_MLFLOW_WORKERS:-2}" \
  --backend-store-uri "sqlite:///$dir/mlflow.db" --artifacts-destination "$artifacts" \
  >"$dir/server.log" 2>&1 </dev/null &
echo $! >"$dir/server.pid"

# Wait until it answers, so that the first job does not fall back to a local store.
probe_host="$host"; [ "$probe_host" = "0.0.0.0" ] && probe_host=127.0.0.1
for _ in $(seq 120); do
  if python -c "import urllib.request,sys; urllib.request.urlopen('http://$probe_host:$port/health', timeout=2)" 2>/dev/null; then
    echo "MLflow tracking server on $host:$port (store $dir, artifacts $artifacts, auth ${MTCORE_MLFLOW_AUTH:-basic-auth}, pid $(cat "$dir/server.pid"))"
    exit 0
  fi
  kill -0 "$(cat "$dir/server.pid")" 2>/dev/null || break
  sleep 0.5
done
echo "error: MLflow server did not start; see $dir/server.log" >&2
tail -20 "$dir/server.log" >&2 || true
exit 1
