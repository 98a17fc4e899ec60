"""Demo shards for the training benchmark: ``tfopt demo-data`` images converted with a 10 %
validation split, so that ``tfopt bench train`` runs without a dataset of its own.

Example:
    >>> shards = make_demo_shards("/tmp/bench")  # /tmp/bench/images, /tmp/bench/shards
"""

from __future__ import annotations

from pathlib import Path

from tfopt.records.convert import convert
from tfopt.records.demo_data import make_demo_data

__all__ = ["make_demo_shards"]


def make_demo_shards(folder, count: int = 600, min_size: int = 160, max_size: int = 240) -> Path:
    """Demo images converted to shards with a 10 % validation split, under ``folder``.

    Args:
        folder: Where ``images/`` and ``shards/`` are written (an empty or new folder).
        count: Images, over 10 classes. Defaults to 600 (a CPU epoch of seconds).
        min_size: Smallest image side, px. Defaults to 160.
        max_size: Largest image side, px. Defaults to 240.

    Returns:
        The shards folder.

    Raises:
        tfopt.errors.InvalidArgumentError: A count or size out of range (checked by
            :func:`tfopt.make_demo_data`).
        tfopt.errors.OutputExistsError: ``folder/images`` holds other files, or ``folder/shards``
            already holds a dataset.
    """
    folder = Path(folder)
    make_demo_data(folder / "images", count=count, min_size=min_size, max_size=max_size)
    convert(folder / "images", folder / "shards", val_fraction=0.1, seed=0)
    return folder / "shards"
