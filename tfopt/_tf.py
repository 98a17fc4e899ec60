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
