"""Argument checks shared by the config dataclasses: one wording for every error.

Errors name the argument, show the value received and say what is allowed (DESIGN.md).
"""

from __future__ import annotations

import enum
import operator

from tfopt.errors import InvalidArgumentError


def choice(enum_type: type[enum.Enum], value, name: str):
    """The member of ``enum_type`` named by ``value`` (case-insensitive).

    Raises:
        InvalidArgumentError: ``value`` is not one of the members, which the message lists.
    """
    try:
        return enum_type(str(value).lower())
    except ValueError:
        allowed = ", ".join(member.value for member in enum_type)
        raise InvalidArgumentError(f"{name}={value!r} is not one of: {allowed}") from None


def require(condition: bool, name: str, value, expected: str) -> None:
    """Raise ``InvalidArgumentError("name=value: expected ...")`` unless ``condition``."""
    if not condition:
        raise InvalidArgumentError(f"{name}={value!r}: expected {expected}")


def whole_number(value, name: str, minimum: int, expected: str | None = None) -> int:
    """``value`` as an int when it is an integer >= ``minimum`` (NumPy integers too, through
    ``operator.index``; never a bool, float or string), else ``InvalidArgumentError``."""
    try:
        # True is an int to Python, never a size or a count
        number = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        number = None
    if number is None or number < minimum:
        raise InvalidArgumentError(
            f"{name}={value!r}: expected {expected or f'an int >= {minimum}'}")
    return number
