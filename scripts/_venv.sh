# Sourced by demo.sh and test.sh: create or reuse .venv in the repository and install tfopt.
# Needs only python3 (3.11+, setup.cfg's python_requires: checked before .venv is made) and
# network access to PyPI. The install is skipped when setup.cfg and pyproject.toml have not
# changed since the last one (a stamp file holds their hash).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
        echo "tfopt needs Python 3.11+ (setup.cfg's python_requires), and $PYTHON is" \
             "$("$PYTHON" --version 2>&1): run with PYTHON=python3.11 (or newer)" >&2
        return 1 2>/dev/null || exit 1
    fi
    echo "creating .venv with $($PYTHON --version)" >&2
    "$PYTHON" -m venv .venv
fi
STAMP=.venv/.tfopt-install-stamp
WANT="$(cat setup.cfg pyproject.toml | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
    echo "installing tfopt and its dependencies into .venv (TensorFlow: about a minute)" >&2
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e ".[test]"
    echo "$WANT" > "$STAMP"
fi
export PATH="$REPO/.venv/bin:$PATH"
