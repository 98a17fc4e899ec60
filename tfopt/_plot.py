"""What every chart writer shares: the format chosen by the file's suffix (SVG, written by hand,
or PNG, drawn with matplotlib from the optional ``plot`` extra) and the atomic write.

The charts themselves live beside what they draw (``tfopt/bench/plot.py``,
``tfopt/analysis/plot.py``); the ``--plot FILE`` options check a file against
:data:`PLOT_SUFFIXES` before any work runs.
"""

from __future__ import annotations

from pathlib import Path

from tfopt._files import atomic_path, atomic_write_bytes
from tfopt.errors import InvalidArgumentError

PLOT_SUFFIXES = (".svg", ".png")  # what --plot accepts


def plot_format(path) -> str:
    """``"svg"`` or ``"png"``, from ``path``'s suffix (any case).

    Raises:
        tfopt.errors.InvalidArgumentError: Another suffix (the message names the path and the valid
            suffixes).
    """
    suffix = Path(path).suffix.lower()
    if suffix not in PLOT_SUFFIXES:
        raise InvalidArgumentError(f"--plot {path}: expected a file ending in "
                                   f"{' or '.join(PLOT_SUFFIXES)}")
    return suffix[1:]


def write_svg(path, text: str) -> Path:
    """Write an SVG document to ``path`` atomically (temporary name, fsync, rename)."""
    path = Path(path)
    atomic_write_bytes(path, text.encode("utf-8"))
    return path


def new_figure(path, size: tuple[float, float], **options):
    """A matplotlib ``Figure`` of ``size`` inches at 100 dpi, for the PNG bound for ``path``
    (``options``: more of ``Figure``'s arguments, such as ``layout="constrained"``).

    A bare ``Figure``, not pyplot's: no backend is chosen or switched (a notebook's stays as it
    was) and nothing is left open in pyplot's registry.

    Raises:
        tfopt.errors.InvalidArgumentError: matplotlib is not installed (the message names the path).
    """
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise InvalidArgumentError(
            f"--plot {path}: a PNG needs matplotlib (pip install 'tfopt[plot]'); "
            "or write an SVG (--plot FILE.svg), which needs nothing") from None
    return Figure(figsize=size, dpi=100, **options)


def save_png(figure, path) -> Path:
    """Save ``figure`` to ``path`` as a PNG, atomically."""
    path = Path(path)
    with atomic_path(path) as temporary:
        figure.savefig(temporary, format="png", bbox_inches="tight")
    return path
