"""Importing TensorFlow without its start-up banners.

TensorFlow 2.21 logs oneDNN and CUDA-probing lines from C++ before absl's logging is set up, so
``TF_CPP_MIN_LOG_LEVEL`` cannot silence them (checked here: levels 2 and 3, GLOG_minloglevel and
ABSL_MIN_LOG_LEVEL all still print). The CLI and tfopt's worker processes import it with file
descriptor 2 pointed at /dev/null for the duration of the import; ``-vv`` shows them again.
"""

from __future__ import annotations

import contextlib
import os
import sys


@contextlib.contextmanager
def _stderr_silenced():
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def keep_python_stderr() -> None:
    """Point ``sys.stderr`` at a duplicate of file descriptor 2, so that what Python writes
    there does not vanish with TensorFlow's banners.

    For the CLI, whose lines (warnings, an interruption's one line) must show: the quiet
    import points fd 2 at /dev/null for its duration, and where another thread imports
    (convert's local writer, at its first image to decode: seconds, half a minute on busy
    cores) a line written meanwhile would go there too. The duplicate is not inherited by child
    processes. Nothing happens where ``sys.stderr`` is not fd 2 (a test's captured stream) or
    was pointed at its duplicate already.
    """
    stream = sys.stderr
    try:
        if stream is None or stream.fileno() != 2:
            return
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation: no descriptor
        return
    stream.flush()
    duplicate = open(os.dup(2), "w", encoding=stream.encoding, errors=stream.errors,
                     buffering=1, closefd=True)
    sys.stderr = duplicate


def import_tensorflow(quiet: bool = True):
    """Import and return the ``tensorflow`` module, without its C++ banners when ``quiet``."""
    if "tensorflow" in sys.modules or not quiet:
        import tensorflow

        return tensorflow
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with _stderr_silenced():
        import tensorflow
        # the CUDA probe ("failed call to cuInit") runs on first device use, not on import
        tensorflow.config.list_physical_devices()
    return tensorflow
