"""Argument checks shared by the config dataclasses: one wording for every error.

Errors name the argument, show the value received and say what is allowed (DESIGN.md).
"""

from __future__ import annotations

import enum

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
