"""Built-in Keras models: a CNN and an MLP, in two sizes, for benchmarks, tuning and examples.

Every model takes uint8 ``(batch, size, size, 3)`` images (what tfopt's pipeline ships), turns
them into floats in its first layer (``Rescaling(1/255)``, on the accelerator) and ends in
``Dense(classes, dtype="float32")`` logits, so the softmax and the loss stay in float32 under a
mixed policy. Sizes (:class:`ModelSize`): ``"small"`` for ``tfopt bench train`` and the examples
(a small ResNet, an MLP of 512 and 256 units), ``"tiny"`` for ``tfopt tune batch-size`` (trials
of seconds on a CPU). This module imports no TensorFlow until a model is built, so the CLI reads
its names and limits before TensorFlow starts.

Example:
    >>> model = build_model("cnn", image_size=96, classes=10)
    >>> compile_model(model, metrics=["accuracy"])
"""

from __future__ import annotations

import enum

from tfopt._validate import choice, whole_number

__all__ = [
    "DEFAULT_IMAGE_SIZE",
    "LEARNING_RATE",
    "MIN_IMAGE_SIZE",
    "ModelName",
    "ModelSize",
    "build_model",
    "compile_model",
    "compiled_model",
]

DEFAULT_IMAGE_SIZE = 96
LEARNING_RATE = 1e-3  # Adam's default: fine for every built-in model at batch 32-128
CNN_WIDTHS = (32, 64, 128)  # channels of the small CNN's residual stages; each halves the side
# Keras's default 0.99 leaves 28 % of the initial (0, 1) statistics in the moving averages after
# the ~130 steps of a 3-epoch demo run, and evaluation then scores at chance; 0.9 settles in ~40
BN_MOMENTUM = 0.9
MLP_UNITS = (512, 256)
TINY_CNN_WIDTHS = (16, 32, 64)  # each followed by a 2x2 max-pool
TINY_MLP_UNITS = 128


class ModelName(str, enum.Enum):
    """The architectures: ``--model`` of ``tfopt bench train``, ``--builtin`` of ``tfopt tune``."""

    CNN = "cnn"
    MLP = "mlp"


class ModelSize(str, enum.Enum):
    """How large the built-in model is."""

    SMALL = "small"  # bench train and the examples: a few CPU epochs on the demo data in minutes
    TINY = "tiny"  # tune batch-size: a memory trial in seconds on a CPU


# The smallest image side of each size: the small CNN halves it three times (16 px leaves 2x2
# for its pooling), the tiny one max-pools it three times (8 px leaves 1x1). Both MLPs take the
# same floor, so that one --image-size check serves both names.
MIN_IMAGE_SIZE = {ModelSize.SMALL: 16, ModelSize.TINY: 8}


# -- small: a ResNet-style CNN and an MLP ----------------------------------------------------


def _inputs(keras, image_size: int) -> tuple:
    inputs = keras.Input((image_size, image_size, 3), dtype="uint8", name="image")
    # uint8 in, floats out: the cast and scale run in the model, on the accelerator
    return inputs, keras.layers.Rescaling(1 / 255, name="rescale")(inputs)


def _conv_bn(keras, x, filters: int, strides: int = 1, name: str = ""):
    x = keras.layers.Conv2D(filters, 3, strides=strides, padding="same", use_bias=False,
                            name=f"{name}_conv")(x)
    return keras.layers.BatchNormalization(momentum=BN_MOMENTUM, name=f"{name}_bn")(x)


def _residual_block(keras, x, filters: int, strides: int, name: str):
    shortcut = x
    y = keras.layers.ReLU(name=f"{name}_relu1")(_conv_bn(keras, x, filters, strides, f"{name}_a"))
    y = _conv_bn(keras, y, filters, 1, f"{name}_b")
    if strides != 1 or shortcut.shape[-1] != filters:
        # a 1x1 projection where the shape changes (ResNet's option B)
        shortcut = keras.layers.Conv2D(filters, 1, strides=strides, use_bias=False,
                                       name=f"{name}_proj")(shortcut)
        shortcut = keras.layers.BatchNormalization(momentum=BN_MOMENTUM,
                                                   name=f"{name}_proj_bn")(shortcut)
    merged = keras.layers.Add(name=f"{name}_add")([shortcut, y])
    return keras.layers.ReLU(name=f"{name}_out")(merged)


def _small_cnn(keras, image_size: int, classes: int):
    # about 0.14 GMAC per 96 px image forward: three stages of 32, 64 and 128 channels at 48,
    # 24 and 12 px
    inputs, x = _inputs(keras, image_size)
    x = keras.layers.ReLU(name="stem_relu")(_conv_bn(keras, x, CNN_WIDTHS[0], 2, "stem"))
    for stage, filters in enumerate(CNN_WIDTHS):
        x = _residual_block(keras, x, filters, 1 if stage == 0 else 2, f"stage{stage + 1}")
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    outputs = keras.layers.Dense(classes, dtype="float32", name="logits")(x)
    return keras.Model(inputs, outputs, name="small_resnet")


def _small_mlp(keras, image_size: int, classes: int):
    inputs, x = _inputs(keras, image_size)
    x = keras.layers.Flatten(name="flatten")(x)
    for index, units in enumerate(MLP_UNITS):
        x = keras.layers.Dense(units, activation="relu", name=f"dense{index + 1}")(x)
    outputs = keras.layers.Dense(classes, dtype="float32", name="logits")(x)
    return keras.Model(inputs, outputs, name="mlp")


# -- tiny: for memory trials -----------------------------------------------------------------


def _tiny(keras, name: ModelName, image_size: int, classes: int):
    layers = keras.layers
    inputs = keras.Input((image_size, image_size, 3), dtype="uint8")
    x = layers.Rescaling(1 / 255)(inputs)
    if name is ModelName.MLP:
        x = layers.Flatten()(x)
        x = layers.Dense(TINY_MLP_UNITS, activation="relu")(x)
    else:
        for filters in TINY_CNN_WIDTHS:
            x = layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
            x = layers.BatchNormalization()(x)
            x = layers.MaxPooling2D()(x)
        x = layers.GlobalAveragePooling2D()(x)
    outputs = layers.Dense(classes, dtype="float32")(x)
    return keras.Model(inputs, outputs, name=f"tfopt_tune_{name.value}")


_BUILDERS = {
    (ModelSize.SMALL, ModelName.CNN): _small_cnn,
    (ModelSize.SMALL, ModelName.MLP): _small_mlp,
    (ModelSize.TINY, ModelName.CNN): lambda keras, *args: _tiny(keras, ModelName.CNN, *args),
    (ModelSize.TINY, ModelName.MLP): lambda keras, *args: _tiny(keras, ModelName.MLP, *args),
}


def build_model(name: str = "cnn", image_size: int = DEFAULT_IMAGE_SIZE, classes: int = 10, *,
                size: str = "small"):
    """An uncompiled built-in Keras model taking uint8 ``(batch, size, size, 3)`` images.

    Layers take the global precision policy in force when this is called: build under
    ``tfopt.enable_policy(...)`` for mixed precision. The logits are float32 whatever the policy.

    Args:
        name: ``"cnn"`` or ``"mlp"`` (:class:`ModelName`). Defaults to "cnn".
        image_size: Side of the square input images in pixels, at least
            ``MIN_IMAGE_SIZE[size]`` (16 small, 8 tiny). Defaults to 96.
        classes: Number of logits, at least 2. Defaults to 10.
        size: ``"small"`` (a ResNet of three residual stages; an MLP of 512 and 256 units) or
            ``"tiny"`` (three conv + max-pool blocks; one hidden layer of 128). Defaults to
            "small".

    Returns:
        A ``keras.Model`` whose output is ``(batch, classes)`` float32 logits.

    Raises:
        tfopt.errors.InvalidArgumentError: An unknown name or size, or a side or class count out of
            range.

    Example:
        >>> model = build_model("cnn", image_size=96, classes=10)
    """
    kind = choice(ModelName, name, "model")
    scale = choice(ModelSize, size, "size")
    minimum = MIN_IMAGE_SIZE[scale]
    image_size = whole_number(image_size, "image_size", minimum,
                              f"an int of at least {minimum} px (the {scale.value} cnn's floor)")
    classes = whole_number(classes, "classes", 2)
    import keras

    return _BUILDERS[scale, kind](keras, image_size, classes)


def compile_model(model, *, steps_per_execution: int = 1, metrics=()) -> None:
    """Compile ``model`` as the built-in models train: Adam at 1e-3, sparse cross-entropy on logits.

    Args:
        model: A Keras model ending in logits, with integer class labels.
        steps_per_execution: Training steps per call of the compiled function. Defaults to 1.
        metrics: Keras metrics, e.g. ``["accuracy"]``. Defaults to none.

    Raises:
        tfopt.errors.InvalidArgumentError: ``steps_per_execution`` below 1.
    """
    import keras

    steps_per_execution = whole_number(steps_per_execution, "steps_per_execution", 1)
    model.compile(keras.optimizers.Adam(LEARNING_RATE),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=list(metrics), steps_per_execution=steps_per_execution)


def compiled_model(name: str = "cnn", image_size: int = DEFAULT_IMAGE_SIZE, classes: int = 10, *,
                   size: str = "small"):
    """:func:`build_model` compiled by :func:`compile_model`: a ``module:function`` spec target.

    ``tfopt tune batch-size --builtin`` names it as ``"tfopt.models:compiled_model"`` (with
    ``size="tiny"``), so isolated trials build it in their own processes.

    Example:
        >>> model = compiled_model("mlp", image_size=16, size="tiny")
    """
    model = build_model(name, image_size, classes, size=size)
    compile_model(model)
    return model
