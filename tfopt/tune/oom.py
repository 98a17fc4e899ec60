"""What "out of memory" looks like: TensorFlow raises it in several forms.

Example:
    >>> is_oom_error(MemoryError())
    True
"""

from __future__ import annotations

__all__ = ["is_oom_error"]

# Lower-case fragments of the messages TensorFlow, XLA, cuDNN and the allocators give when
# memory runs out in a form other than ResourceExhaustedError (InternalError, UnknownError).
_OOM_PHRASES = ("out of memory", "resource exhausted", "resource_exhausted", "failed to allocate",
                "cuda_error_out_of_memory", "cudnn_status_alloc_failed")


def is_oom_error(error: BaseException) -> bool:
    """Whether an exception means "out of memory", in any of the forms TensorFlow raises it.

    True for ``tf.errors.ResourceExhaustedError``, Python's ``MemoryError``, and other
    TensorFlow errors (``InternalError``, ``UnknownError``, XLA's ``RuntimeError``) whose message
    says so ("OOM", "out of memory", "failed to allocate", ...). The exception's causes
    (``__cause__``/``__context__``) are checked too, since Keras re-raises some of them.

    Args:
        error: The exception caught around a training step.

    Example:
        >>> is_oom_error(MemoryError())
        True
    """
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, MemoryError) or type(error).__name__ == "ResourceExhaustedError":
            return True
        message = str(error).lower()
        if any(phrase in message for phrase in _OOM_PHRASES):
            return True
        # "OOM" as a word ("OOM when allocating tensor"), not inside "room" or "zoom"
        if "oom" in "".join(ch if ch.isalnum() else " " for ch in message).split():
            return True
        error = error.__cause__ or error.__context__
    return False
