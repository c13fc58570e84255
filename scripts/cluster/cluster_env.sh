# Source this. The cluster's settings that a driver started by hand on the head needs as `ray start --head` had them:
# start_head.sh writes them to $MTCORE_CLUSTER_ENV (default ~/.mtcore/cluster.env) with write_cluster_env, and
# job.sh sources that file. A `ray exec` shell has nothing of the head start line's environment (MTCORE_HOME=...):
# its driver wrote to ~/mtcore/runs on the head while Ray Data and Train wrote to MTCORE_HOME on the GPU nodes.
# In the file, a variable already set (and not empty) in the environment wins.
MTCORE_CLUSTER_ENV="${MTCORE_CLUSTER_ENV:-$HOME/.mtcore/cluster.env}"
MTCORE_CLUSTER_ENV_KEYS="MTCORE_HOME MLFLOW_TRACKING_URI HF_HUB_OFFLINE RAY_AUTH_TOKEN_PATH"

write_cluster_env() {
  local key tmp
  mkdir -p "$(dirname "$MTCORE_CLUSTER_ENV")"
  tmp="$MTCORE_CLUSTER_ENV.tmp.$$"
  {
    echo "# Written by scripts/cluster/start_head.sh when it started Ray; sourced by scripts/cluster/job.sh."
    echo "# A variable already set in the environment wins over its line here."
    for key in $MTCORE_CLUSTER_ENV_KEYS; do
      if [ -n "${!key:-}" ]; then
        printf '[ -n "${%s:-}" ] || export %s=%q\n' "$key" "$key" "${!key}"
      fi
    done
  } >"$tmp"
  mv -f "$tmp" "$MTCORE_CLUSTER_ENV"  # whole or not at all: a job may read it while the head restarts
}
