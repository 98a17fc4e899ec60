"""Keras 3 ``fit``/``evaluate``/``predict`` under ``MultiWorkerMirroredStrategy``, made to work.

Upstream, Keras 3 training under that strategy fails before the first step
(keras-team/keras#20585). :func:`fix_keras_multi_worker` replaces three private functions of
``keras/src/backend/tensorflow/trainer.py`` (once per process, in ``tfopt._internals``);
:func:`tfopt.select_strategy` calls it whenever it builds a multi-worker strategy. It is pinned:
silent on the Keras versions in :data:`TESTED_KERAS`, a warning on another 3.x that still has
those functions, an error where they are gone. The failures and the fixes are described in
``docs/distribute.md``.

Example:
    >>> fix_keras_multi_worker()  # before building your own MultiWorkerMirroredStrategy
    True
"""

from __future__ import annotations

from tfopt._internals import TESTED_KERAS
from tfopt._internals.keras_trainer import patch_trainer

__all__ = ["TESTED_KERAS", "fix_keras_multi_worker"]


def fix_keras_multi_worker() -> bool:
    """Make Keras 3 ``fit``, ``evaluate`` and ``predict`` work under MultiWorkerMirroredStrategy.

    Safe to call more than once and on one machine: the replaced functions behave as Keras's
    own except in multi-worker mode. ``docs/distribute.md`` describes the upstream failures.

    Returns:
        True when this call applied the fix, False when it was already applied.

    Raises:
        TfoptError: This Keras no longer has the functions the fix replaces (the message
            names the tested versions).

    Example:
        >>> fix_keras_multi_worker()  # select_strategy("multi_worker") does this for you
        True
    """
    return patch_trainer()
