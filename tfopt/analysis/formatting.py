"""How the analysis writes its numbers, in its table (:meth:`PipelineReport.describe`) and on
its chart (:mod:`tfopt.analysis.plot`) alike. No TensorFlow.

Example:
    >>> format_number(1234.5), format_number(0.01234), format_number(2.5e-6, 1e6)
    ('1,234', '0.0123', '2.5')
"""

from __future__ import annotations

import math


def format_number(value: float | None, scale: float = 1.0) -> str:
    """``value`` times ``scale``: whole with thousands separators from 100 up, else three
    significant digits; ``"-"`` where it is unknown (None) or not finite."""
    if value is None or not math.isfinite(value):
        return "-"
    value *= scale
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
