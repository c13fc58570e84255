#!/usr/bin/env bash
# Install what is needed, then run the whole test suite. Extra arguments go to pytest.
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
set +e
python -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "error: pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
