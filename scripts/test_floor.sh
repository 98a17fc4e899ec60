#!/usr/bin/env bash
# Run the tests of tfopt's private-API code on the lowest TensorFlow and Keras that setup.cfg
# declares, in .venv-floor (created if missing). CI runs it after the main suite, which runs on
# the newest releases. Extra arguments go to pytest, e.g.  scripts/test_floor.sh -x
#
# The floors are read from setup.cfg (`tensorflow>=X`, `keras>=Y` in install_requires) and
# installed pinned exactly (tensorflow==X, keras==Y), so raising a floor there is all it takes.
# The selection: what patches or subclasses private Keras code (gradient accumulation, the
# multi-worker fix, fused and synchronized batch norm, BackupAndRestore, precision, saving;
# tests/train and the strategy and multi-worker tests) and the one test per private TensorFlow
# API tfopt.analyze uses (tests/analysis/test_tfapi.py).
# As in scripts/test.sh: tests not marked `alone` on all cores, then the `alone` ones by
# themselves; TFOPT_TEST_WORKERS sets the first run's process count.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
cd "$REPO"
PYTHON="${PYTHON:-python3}"
VENV=.venv-floor

# "TF KERAS": the lower bounds in setup.cfg's install_requires
FLOORS="$("$PYTHON" - <<'EOF'
import configparser, re, sys

config = configparser.ConfigParser()
config.read("setup.cfg")
floors = {}
for line in config["options"]["install_requires"].splitlines():
    match = re.match(r"\s*(tensorflow|keras)\s*(?:\[[^]]*\])?\s*([^;#]*)", line)
    if match:
        bound = re.search(r">=\s*([0-9][^,\s]*)", match.group(2))
        if bound:
            floors[match.group(1)] = bound.group(1)
missing = [name for name in ("tensorflow", "keras") if name not in floors]
if missing:
    sys.exit(f"setup.cfg: no '>=' lower bound for {', '.join(missing)} in install_requires")
print(floors["tensorflow"], floors["keras"])
EOF
)"
read -r TF_FLOOR KERAS_FLOOR <<< "$FLOORS"

if [ ! -x "$VENV/bin/python" ]; then
    echo "creating $VENV with $($PYTHON --version)" >&2
    "$PYTHON" -m venv "$VENV"
fi
STAMP="$VENV/.tfopt-install-stamp"
WANT="$( (cat setup.cfg pyproject.toml; echo "tensorflow==$TF_FLOOR keras==$KERAS_FLOOR") \
    | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
    echo "installing tensorflow==$TF_FLOOR, keras==$KERAS_FLOOR and tfopt into $VENV" \
         "(TensorFlow: about a minute)" >&2
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet "tensorflow==$TF_FLOOR" "keras==$KERAS_FLOOR" \
        -e ".[test]"
    echo "$WANT" > "$STAMP"
fi
# the floors, not whatever else pip may have left there
"$VENV/bin/python" - "$TF_FLOOR" "$KERAS_FLOOR" <<'EOF'
import sys
from importlib.metadata import version

from packaging.version import Version

for name, want in zip(("tensorflow", "keras"), sys.argv[1:], strict=True):
    if Version(version(name)) != Version(want):
        sys.exit(f".venv-floor has {name} {version(name)}, not the floor {want}: "
                 "delete .venv-floor and run again")
print(f"floor: tensorflow {version('tensorflow')}, keras {version('keras')}", file=sys.stderr)
EOF
export PATH="$REPO/$VENV/bin:$PATH"

TESTS=(
    tests/train
    tests/distribute/test_keras_multi_worker.py
    tests/distribute/test_multi_worker_backup.py
    tests/distribute/test_strategy.py
    tests/analysis/test_tfapi.py
    tests/test_internals.py
)
WORKERS="${TFOPT_TEST_WORKERS:-$(python -c 'import os; print(len(os.sched_getaffinity(0)))')}"

run_pytest() {
    set +e
    python -m pytest "$@"
    local status=$?
    set -e
    return "$status"
}

status_rest=0
if [ "$WORKERS" -gt 1 ]; then
    run_pytest -n "$WORKERS" --dist worksteal --alone without "${TESTS[@]}" "$@" || status_rest=$?
else
    run_pytest --alone without "${TESTS[@]}" "$@" || status_rest=$?
fi
status_alone=0
run_pytest --alone only "${TESTS[@]}" "$@" || status_alone=$?

# exit code 5 is "no tests collected": fine for one of the runs (a selection without an `alone`
# test), a failure when neither ran a test
if [ "$status_rest" -eq 5 ] && [ "$status_alone" -eq 5 ]; then
    echo "pytest collected no tests: treating that as a failure" >&2
    exit 1
fi
for status in "$status_rest" "$status_alone"; do
    if [ "$status" -ne 0 ] && [ "$status" -ne 5 ]; then
        exit "$status"
    fi
done
exit 0
