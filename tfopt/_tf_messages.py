"""Short, readable TensorFlow error messages for tfopt's own reports."""

from __future__ import annotations

import re

# TensorFlow wraps eager-op errors as "{{function_node __wrapped__Op_device_...}} msg [Op:Op]".
_WRAPPER = re.compile(r"\{\{function_node [^}]*\}\}\s*")
_OP_SUFFIX = re.compile(r"\s*\[Op:[^\]]*\].*$", re.DOTALL)


def short_tf_message(error: BaseException) -> str:
    """The first line of a TensorFlow error's message, without the op-wrapper noise."""
    message = getattr(error, "message", None) or str(error) or type(error).__name__
    message = _OP_SUFFIX.sub("", _WRAPPER.sub("", message))
    return message.strip().splitlines()[0] if message.strip() else type(error).__name__
