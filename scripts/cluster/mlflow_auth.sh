# Source this: exports the cluster's MLflow credentials (MLFLOW_TRACKING_USERNAME/PASSWORD), which
# MLflow clients send with every request and start_mlflow.sh gives the server's admin user.
#
# They are derived from the cluster's Ray auth token (RAY_AUTH_TOKEN, else RAY_AUTH_TOKEN_PATH, else
# ~/.ray/auth_token), which `ray up` copies to every node: there is one secret to create and hand out,
# it never enters the repository, and whoever holds the Ray token can run code on the cluster anyway,
# so the MLflow password grants nothing more. Credentials already in the environment win.
_mtcore_token="${RAY_AUTH_TOKEN:-}"
if [ -z "$_mtcore_token" ] && [ -s "${RAY_AUTH_TOKEN_PATH:-$HOME/.ray/auth_token}" ]; then
  _mtcore_token="$(cat "${RAY_AUTH_TOKEN_PATH:-$HOME/.ray/auth_token}")"
fi
if [ -n "$_mtcore_token" ] && [ -z "${MLFLOW_TRACKING_PASSWORD:-}" ]; then
  export MLFLOW_TRACKING_USERNAME="${MLFLOW_TRACKING_USERNAME:-mtcore}"
  MLFLOW_TRACKING_PASSWORD="$(printf %s "$_mtcore_token" | python3 -c \
    'import hashlib, hmac, sys; print(hmac.new(sys.stdin.buffer.read().strip(), b"mtcore-mlflow", hashlib.sha256).hexdigest())')"
  export MLFLOW_TRACKING_PASSWORD
fi
unset _mtcore_token
