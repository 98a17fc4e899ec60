"""``tfopt.Run``: the whole tfopt way of training a Keras model in one object.

``config`` (what was asked) and ``plan`` (what was decided, a pure planner) import no
TensorFlow; ``Run`` itself (``runner``) builds the strategy, the pipelines and the callbacks.
The guide is ``docs/run.md``.
"""

from __future__ import annotations

__all__ = ["Run"]


def __getattr__(name: str):
    if name == "Run":  # TensorFlow is imported with it, not with this package
        from tfopt.run.runner import Run

        return Run
    raise AttributeError(f"module 'tfopt.run' has no attribute {name!r}")
