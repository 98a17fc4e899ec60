"""The Keras objects tfopt defines, for ``keras.models.load_model``.

A model saved with a :class:`~tfopt.data.augment.layer.Augment` layer, or compiled with an optimizer
whose schedule :func:`~tfopt.make_optimizer` wrapped in
:class:`~tfopt.train.accumulation.UpdateStepSchedule`, names them ``tfopt>Augment`` and
``tfopt>UpdateStepSchedule`` in its config. Keras finds such names in its registry, which a
class joins when its module is imported. ``import tfopt`` imports none of them (it must stay
free of TensorFlow for the CLI, and its names resolve on first use), so a script that only
loads a model has to say that it wants them: call :func:`keras_objects` once before
``load_model``, or pass what it returns as ``custom_objects``.
"""

from __future__ import annotations

__all__ = ["keras_objects"]


def keras_objects() -> dict:
    """Register tfopt's Keras-serialisable classes and return them by their registered names.

    Imports the modules that define them (and so TensorFlow and Keras), which registers every
    class with Keras; the returned dict also works as ``custom_objects``.

    Returns:
        ``{"tfopt>Augment": Augment, "tfopt>UpdateStepSchedule": UpdateStepSchedule}``.

    Example:
        >>> import keras, tfopt
        >>> model = keras.models.load_model("model.keras", custom_objects=tfopt.keras_objects())
    """
    from tfopt.data.augment.layer import Augment
    from tfopt.train.accumulation import UpdateStepSchedule

    return {f"tfopt>{cls.__name__}": cls for cls in (Augment, UpdateStepSchedule)}
