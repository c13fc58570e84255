# Shared by scripts/demo.sh and scripts/test.sh: create .venv and install mtcore once.
# Re-installs only when pyproject.toml changes. Safe to source repeatedly.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON="${PYTHON:-python3}"
VENV="${MTCORE_VENV:-.venv}"
# torch is pinned so that a CPU-only machine with a local wheel (this project's CI) and a
# CUDA machine (PyPI's normal build) both get the same version; override with TORCH_SPEC.
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"

if ! command -v "$PYTHON" >/dev/null; then
  echo "error: $PYTHON not found; install Python 3.10+ (e.g. apt-get install python3 python3-venv)" >&2
  exit 1
fi
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
  echo "error: mtcore needs Python >= 3.10, $PYTHON is $("$PYTHON" --version 2>&1)" >&2
  exit 1
fi

if [ ! -x "$VENV/bin/python" ]; then
  if ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
    # Debian/Ubuntu ship venv separately; install it rather than ask the user to.
    rm -rf "$VENV"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    echo "python3 -m venv is unavailable; installing python3-venv with apt-get" >&2
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq python3-venv >/dev/null
    "$PYTHON" -m venv "$VENV"
  fi
fi

STAMP="$VENV/.mtcore-installed"
WANT="$(sha256sum pyproject.toml | cut -c1-16) $TORCH_SPEC"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
  echo "installing mtcore and its dependencies into $VENV (first run takes a few minutes)" >&2
  "$VENV/bin/pip" install -q --disable-pip-version-check "$TORCH_SPEC"
  "$VENV/bin/pip" install -q --disable-pip-version-check -e ".[test]"
  echo "$WANT" > "$STAMP"
fi
export PATH="$PWD/$VENV/bin:$PATH"
