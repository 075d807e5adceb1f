#!/usr/bin/env bash
# Proves the client installs both ways, each into a fresh venv:
#   1. online:  pip install ./clients/python            (isolated build, setuptools from the index)
#   2. offline: pip wheel --no-deps --no-build-isolation -w dist ./clients/python
#               pip install --no-index dist/*.whl       (nothing fetched from any index)
# then imports ckptd in each (from outside the source tree). Offline-only machines: set
# CKPTD_SKIP_ONLINE=1 to run just the offline check.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"   # clients/python
py="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
check_import() {
  (cd "$work" && "$1/bin/python" -c 'import ckptd, os; print("   import ckptd OK:", ckptd.__version__, os.path.dirname(ckptd.__file__)); assert os.path.exists(os.path.join(os.path.dirname(ckptd.__file__), "py.typed"))')
}

if [ "${CKPTD_SKIP_ONLINE:-}" != "1" ]; then
  echo "== online: pip install $here"
  "$py" -m venv "$work/online"
  "$work/online/bin/python" -m pip install -q "$here"
  check_import "$work/online"
fi

echo "== offline: pip wheel --no-deps --no-build-isolation, then pip install --no-index"
"$py" -m venv "$work/offline"
# A fresh venv has only what ensurepip bundles (pip; setuptools up to Python 3.11). Without
# setuptools at all (Python >= 3.12 venvs), the in-tree backend builds the wheel with the stdlib.
(cd "$work" && PIP_NO_INDEX=1 "$work/offline/bin/python" -m pip wheel -q --no-deps --no-build-isolation -w "$work/dist" "$here")
PIP_NO_INDEX=1 "$work/offline/bin/python" -m pip install -q --no-index "$work"/dist/*.whl
check_import "$work/offline"

echo "== offline: pip install --no-index --no-build-isolation $here"
"$py" -m venv "$work/offline2"
PIP_NO_INDEX=1 "$work/offline2/bin/python" -m pip install -q --no-index --no-build-isolation "$here"
check_import "$work/offline2"
echo "== install checks passed"
