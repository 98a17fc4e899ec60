"""Batch normalisation over the global batch, for training on several replicas or workers.

Keras 3 keeps ``BatchNormalization``'s moving mean and variance per replica (variables with
aggregation "none"): after multi-worker training each worker holds the statistics of its own
batches. :func:`synchronize_batch_norm` switches a model to statistics over the global batch.
A model rewrite like :func:`tfopt.fuse_batch_norm`, and exclusive with it.

Example:
    >>> from tfopt.train.sync_batch_norm import synchronize_batch_norm
    >>> with tfopt.select_strategy().scope():
    ...     model = build_model()
    ...     synchronize_batch_norm(model)
"""

from __future__ import annotations

from tfopt._internals.keras_model import all_layers
from tfopt.errors import InvalidArgumentError

__all__ = ["synchronize_batch_norm"]


def synchronize_batch_norm(model) -> int:
    """Compute every ``BatchNormalization`` layer's batch statistics over the global batch.

    Sets ``synchronized=True`` (Keras's own option, TensorFlow backend) on each batch
    normalisation layer of ``model``, nested models included: mean and variance come from an
    all-reduce over all replicas of all workers (three small all-reduces per layer per step),
    so the moving statistics are the same on every worker and equal one process's on the same
    global batch. Without it, Keras 3 keeps them per replica. Call it before the first
    ``fit``, ``evaluate`` or ``predict`` (the step functions read the setting when traced).
    On one device it changes nothing but adds those no-op reductions.

    Args:
        model: A Keras model.

    Returns:
        How many layers were switched.

    Raises:
        InvalidArgumentError: ``model`` is not a Keras model, or :func:`fuse_batch_norm` ran on
            it: the fused kernel computes per-replica statistics, so use one or the other
            (synchronising on several workers, fusing on one).

    Example:
        >>> with select_strategy().scope():
        ...     model = build_model()
        >>> synchronize_batch_norm(model)
        12
    """
    import keras

    from tfopt.train.fused_batch_norm import check_keras_model, is_fused

    check_keras_model(model, "synchronize_batch_norm")
    layers = all_layers(model)
    fused = [layer.name for layer in layers if is_fused(layer)]
    if fused:
        raise InvalidArgumentError(
            f"synchronize_batch_norm(model): fuse_batch_norm already switched {len(fused)} "
            f"layer(s) of {model.name!r} to the fused kernel ({', '.join(fused[:3])}"
            f"{', ...' if len(fused) > 3 else ''}), which keeps per-replica statistics; use "
            "one or the other: synchronize_batch_norm for identical statistics on several "
            "workers, fuse_batch_norm for speed on one (build the model again without it)")
    switched = 0
    for layer in layers:
        if isinstance(layer, keras.layers.BatchNormalization) and not layer.synchronized:
            layer.synchronized = True
            switched += 1
    return switched
