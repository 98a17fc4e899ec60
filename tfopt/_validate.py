"""Checks of public arguments: one module, one wording for every error.

Every function raises :class:`~tfopt.errors.InvalidArgumentError` with the argument's name, the
value received and what is allowed (``"shards=2.5: expected an int >= 1"``), and returns the
value in its plain Python type. Integers accept NumPy integers (``operator.index``) but never a
bool, a float or a string: ``True`` is an int to Python, never a count, and ``2.5`` shards or
``"3"`` as a seed is a mistake to name, not to round or parse.

Example:
    >>> whole_number(4, "workers", 1)
    4
    >>> number(0.1, "val_fraction", low=0.0, high=1.0, open_high=True)
    0.1
"""

from __future__ import annotations

import enum
import math
import numbers
import operator
from collections.abc import Iterable, Mapping

from tfopt.errors import InvalidArgumentError


def is_bool(value) -> bool:
    """True for Python's and NumPy's bools (``np.bool_``; without importing NumPy)."""
    return isinstance(value, bool) or (type(value).__module__ == "numpy"
                                       and type(value).__name__ in ("bool", "bool_"))


def is_int(value) -> bool:
    """True for Python and NumPy integers, False for bools (Python's and NumPy's)."""
    if is_bool(value):
        return False
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def is_number(value) -> bool:
    """True for real numbers (ints, floats, NumPy scalars), False for bools and strings."""
    return not is_bool(value) and isinstance(value, numbers.Real)


def fail(name: str, value, expected: str) -> InvalidArgumentError:
    """The error for ``name=value`` (to raise): ``"name=value: expected ..."``."""
    return InvalidArgumentError(f"{name}={value!r}: expected {expected}")


def require(condition: bool, name: str, value, expected: str) -> None:
    """Raise ``InvalidArgumentError("name=value: expected ...")`` unless ``condition``."""
    if not condition:
        raise fail(name, value, expected)


def choice(enum_type: type[enum.Enum], value, name: str):
    """The member of ``enum_type`` named by ``value`` (case-insensitive), or ``value`` itself
    when it is a member already (``str()`` of a member is ``"Kind.NAME"``, not its value).

    Raises:
        InvalidArgumentError: ``value`` is not one of the members, which the message lists.
    """
    if isinstance(value, enum_type):
        return value
    try:
        return enum_type(str(value).lower())
    except ValueError:
        allowed = ", ".join(member.value for member in enum_type)
        raise InvalidArgumentError(f"{name}={value!r} is not one of: {allowed}") from None


def whole_number(value, name: str, minimum: int | None = None, expected: str | None = None,
                 maximum: int | None = None) -> int:
    """``value`` as an int when it is an integer within ``[minimum, maximum]`` (either bound may
    be None: unbounded).

    Raises:
        InvalidArgumentError: not an integer (a bool, float or string included), or out of
            range.
    """
    number_ = operator.index(value) if is_int(value) else None
    if (number_ is None or (minimum is not None and number_ < minimum)
            or (maximum is not None and number_ > maximum)):
        if expected is None:
            if minimum is not None and maximum is not None:
                expected = f"an int from {minimum} to {maximum}"
            elif minimum is not None:
                expected = f"an int >= {minimum}"
            elif maximum is not None:
                expected = f"an int <= {maximum}"
            else:
                expected = "an int"
        raise fail(name, value, expected)
    return number_


def optional_whole_number(value, name: str, minimum: int | None = None,
                          expected: str | None = None, maximum: int | None = None) -> int | None:
    """None as it is, anything else through :func:`whole_number`."""
    return None if value is None else whole_number(value, name, minimum, expected, maximum)


def number(value, name: str, *, low: float = -math.inf, high: float = math.inf,
           open_low: bool = False, open_high: bool = False,
           expected: str | None = None) -> float:
    """``value`` as a float when it is a finite real number within its bounds (``open_*``
    excludes the bound itself).

    Raises:
        InvalidArgumentError: not a real number (a bool or string included), NaN, infinite, or
            out of range.
    """
    ok = is_number(value) and math.isfinite(value)
    if ok:
        ok = (value > low if open_low else value >= low) and (
            value < high if open_high else value <= high)
    if not ok:
        if expected is None:
            left = "(" if open_low else "["
            right = ")" if open_high else "]"
            expected = f"a finite number in {left}{low:g}, {high:g}{right}"
        raise fail(name, value, expected)
    return float(value)


def flag(value, name: str) -> bool:
    """``value`` when it is a bool (NumPy's too); 1, "yes" and None are mistakes to name."""
    if not is_bool(value):
        raise fail(name, value, "True or False")
    return bool(value)


def size_pair(value, name: str) -> tuple[int, int]:
    """``(height, width)`` from one positive int (a square) or a pair of them."""
    pair = (value, value) if is_int(value) else value
    try:
        pair = tuple(pair)
    except TypeError:
        pair = ()
    if len(pair) != 2 or not all(is_int(side) and side >= 1 for side in pair):
        raise fail(name, value, "a positive int or (height, width), e.g. 224")
    return operator.index(pair[0]), operator.index(pair[1])


def number_pair(value, name: str, low: float, high: float, expected: str) -> tuple[float, float]:
    """``(a, b)`` of finite numbers with ``low < a <= b <= high``."""
    try:
        pair = tuple(value)
    except TypeError:
        pair = ()
    ok = (len(pair) == 2 and all(is_number(x) and math.isfinite(x) for x in pair)
          and low < pair[0] <= pair[1] <= high)
    if not ok:
        raise fail(name, value, expected)
    return float(pair[0]), float(pair[1])


def numbers_above(value, name: str, low: float, expected: str) -> tuple[float, ...]:
    """One finite number above ``low``, or a non-empty sequence of them, as a tuple."""
    values = (value,) if is_number(value) else value
    try:
        values = tuple(values)
    except TypeError:
        values = ()
    if not values or not all(is_number(x) and math.isfinite(x) and x > low for x in values):
        raise fail(name, value, expected)
    return tuple(float(x) for x in values)


def known_options(given: Mapping | Iterable[str], allowed: Iterable[str], where: str) -> None:
    """Refuse option names not in ``allowed``, naming them and listing the allowed ones.

    ``convert(shard=3)`` should say that ``shard`` is not an option of ``convert`` and that
    ``shards`` is, not raise Python's bare ``TypeError``.
    """
    allowed = list(allowed)
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise InvalidArgumentError(
            f"{where}: unknown option(s) {', '.join(unknown)}; expected one of: "
            f"{', '.join(allowed)}")
