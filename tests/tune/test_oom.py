"""``is_oom_error`` recognises every form "out of memory" takes, and nothing else."""

from __future__ import annotations

from tfopt.tune.oom import is_oom_error


def test_is_oom_error_recognises_the_forms(tf):
    assert is_oom_error(tf.errors.ResourceExhaustedError(None, None, "x"))
    assert is_oom_error(tf.errors.InternalError(None, None, "Dst tensor is not initialized. OOM"))
    assert is_oom_error(tf.errors.UnknownError(None, None, "CUDA_ERROR_OUT_OF_MEMORY: out of memory"))
    assert is_oom_error(MemoryError())
    assert is_oom_error(RuntimeError("RESOURCE_EXHAUSTED: Failed to allocate 2.00GiB"))
    try:
        try:
            raise MemoryError
        except MemoryError as inner:
            raise RuntimeError("step failed") from inner
    except RuntimeError as outer:
        assert is_oom_error(outer)
    assert not is_oom_error(ValueError("no room for a zoom"))
    assert not is_oom_error(tf.errors.InvalidArgumentError(None, None, "label 12 out of range"))
