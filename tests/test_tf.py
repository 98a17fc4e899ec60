"""tfopt/_tf.py: the quiet TensorFlow import, and Python's own stderr kept out of its silence."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tfopt._tf import keep_python_stderr

# fd 2 pointed at /dev/null, as the quiet import does for its duration (in another thread, as
# convert's local writer imports it), then a line written the way the CLI's log handler does
SILENCED_THEN_WRITTEN = """
import os, sys
from tfopt._tf import keep_python_stderr
if sys.argv[1] == "kept":
    keep_python_stderr()
os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
print("tfopt: WARNING: interrupted", file=sys.stderr, flush=True)
"""


@pytest.mark.parametrize("kept", [True, False])
def test_python_s_stderr_is_kept_out_of_the_import_s_silence(kept):
    result = subprocess.run(
        [sys.executable, "-c", SILENCED_THEN_WRITTEN, "kept" if kept else "not kept"],
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert result.stderr == ("tfopt: WARNING: interrupted\n" if kept else "")


def test_a_captured_stream_is_left_alone(capsys):
    stream = sys.stderr
    keep_python_stderr()  # pytest's capture: not fd 2
    assert sys.stderr is stream
