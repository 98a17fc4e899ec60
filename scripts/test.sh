#!/usr/bin/env bash
# Install tfopt into .venv (created if missing) and run the test suite. Extra arguments go to
# pytest, e.g.  scripts/test.sh -m "not slow"  or  scripts/test.sh tests/records -x
#
# Two runs. First every test not marked `alone`, in one process more than the cores
# (pytest-xdist: tests wait on TensorFlow's start-up, child processes and files, and with one
# process a core the CPU sat idle 14 % of the time). Then the `alone` tests by themselves, in
# one process: they assert what measured rates show or catch a real process at a moment, and a
# test running beside them upsets both.
# TFOPT_TEST_WORKERS sets the first run's process count (default: the cores + 1; 1: one process).
set -euo pipefail
source "$(dirname "$0")/_venv.sh"
WORKERS="${TFOPT_TEST_WORKERS:-$(python -c 'import os; print(len(os.sched_getaffinity(0)) + 1)')}"

run_pytest() {
    set +e
    python -m pytest "$@"
    local status=$?
    set -e
    return "$status"
}

status_rest=0
if [ "$WORKERS" -gt 1 ]; then
    run_pytest -n "$WORKERS" --dist worksteal --alone without "$@" || status_rest=$?
else
    run_pytest --alone without "$@" || status_rest=$?
fi
status_alone=0
run_pytest --alone only "$@" || status_alone=$?

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
