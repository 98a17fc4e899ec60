#!/usr/bin/env bash
# Install tfopt into .venv (created if missing) and run the test suite. Extra arguments go to
# pytest, e.g.  scripts/test.sh -m "not slow"  or  scripts/test.sh tests/records -x
set -euo pipefail
source "$(dirname "$0")/_venv.sh"
set +e
python -m pytest "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
    echo "pytest collected no tests: treating that as a failure" >&2
    exit 1
fi
exit "$status"
