"""Built-in models for ``tfopt bench train`` and ``tfopt tune``: a small ResNet-style CNN, an MLP.

Both take uint8 image batches (what tfopt's pipeline ships) and turn them into floats in their
first layer (``Rescaling(1/255)``, on the accelerator), so every input pipeline feeds them the
same bytes. Both end in ``Dense(classes, dtype="float32")`` logits: under a mixed policy the
softmax and the loss stay in float32, as ``tfopt.check_model_precision`` asks.

Sizes are chosen so that a CPU run of a few epochs on the demo data takes minutes: the CNN at
96 px is about 0.14 GMAC per image forward (three stages of 32, 64 and 128 channels at 48, 24
and 12 px), the MLP is two hidden layers of 512 and 256 units.
"""

from __future__ import annotations

import enum

from tfopt._tf import import_tensorflow
from tfopt.bench import MIN_MODEL_IMAGE_SIZE
from tfopt.errors import InvalidArgumentError

import_tensorflow()
import keras  # noqa: E402 - after the quiet TensorFlow import

__all__ = ["MODELS", "ModelName", "build_model"]

DEFAULT_IMAGE_SIZE = 96
CNN_WIDTHS = (32, 64, 128)  # channels of the three residual stages; each halves the side
# Keras's default 0.99 leaves 28 % of the initial (0, 1) statistics in the moving averages after
# the ~130 steps of a 3-epoch demo run, and evaluation then scores at chance; 0.9 settles in ~40
BN_MOMENTUM = 0.9
MLP_UNITS = (512, 256)


class ModelName(str, enum.Enum):
    CNN = "cnn"
    MLP = "mlp"


def _inputs(image_size: int) -> tuple:
    inputs = keras.Input((image_size, image_size, 3), dtype="uint8", name="image")
    # uint8 in, floats out: the cast and scale run in the model, on the accelerator
    return inputs, keras.layers.Rescaling(1 / 255, name="rescale")(inputs)


def _conv_bn(x, filters: int, strides: int = 1, name: str = ""):
    x = keras.layers.Conv2D(filters, 3, strides=strides, padding="same", use_bias=False,
                            name=f"{name}_conv")(x)
    return keras.layers.BatchNormalization(momentum=BN_MOMENTUM, name=f"{name}_bn")(x)


def _residual_block(x, filters: int, strides: int, name: str):
    shortcut = x
    y = keras.layers.ReLU(name=f"{name}_relu1")(_conv_bn(x, filters, strides, f"{name}_a"))
    y = _conv_bn(y, filters, 1, f"{name}_b")
    if strides != 1 or shortcut.shape[-1] != filters:
        # a 1x1 projection where the shape changes (ResNet's option B)
        shortcut = keras.layers.Conv2D(filters, 1, strides=strides, use_bias=False,
                                       name=f"{name}_proj")(shortcut)
        shortcut = keras.layers.BatchNormalization(momentum=BN_MOMENTUM,
                                                   name=f"{name}_proj_bn")(shortcut)
    merged = keras.layers.Add(name=f"{name}_add")([shortcut, y])
    return keras.layers.ReLU(name=f"{name}_out")(merged)


def _cnn(image_size: int, classes: int):
    inputs, x = _inputs(image_size)
    x = keras.layers.ReLU(name="stem_relu")(_conv_bn(x, CNN_WIDTHS[0], 2, "stem"))
    for stage, filters in enumerate(CNN_WIDTHS):
        x = _residual_block(x, filters, 1 if stage == 0 else 2, f"stage{stage + 1}")
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    outputs = keras.layers.Dense(classes, dtype="float32", name="logits")(x)
    return keras.Model(inputs, outputs, name="small_resnet")


def _mlp(image_size: int, classes: int):
    inputs, x = _inputs(image_size)
    x = keras.layers.Flatten(name="flatten")(x)
    for index, units in enumerate(MLP_UNITS):
        x = keras.layers.Dense(units, activation="relu", name=f"dense{index + 1}")(x)
    outputs = keras.layers.Dense(classes, dtype="float32", name="logits")(x)
    return keras.Model(inputs, outputs, name="mlp")


MODELS = {ModelName.CNN: _cnn, ModelName.MLP: _mlp}


def build_model(name: str = "cnn", image_size: int = DEFAULT_IMAGE_SIZE, classes: int = 10):
    """An uncompiled built-in Keras model taking uint8 ``(batch, size, size, 3)`` images.

    Layers take the global precision policy in force when this is called: build under
    ``tfopt.enable_policy(...)`` for mixed precision. The logits are float32 whatever the policy.

    Args:
        name: ``"cnn"`` (a small ResNet: stem, three residual stages, global average pooling)
            or ``"mlp"`` (two hidden layers). Defaults to "cnn".
        image_size: Side of the square input images in pixels. Defaults to 96.
        classes: Number of logits. Defaults to 10.

    Returns:
        A ``keras.Model`` whose output is ``(batch, classes)`` float32 logits.

    Raises:
        tfopt.InvalidArgumentError: An unknown name, or a size or class count out of range.

    Example:
        >>> model = build_model("cnn", image_size=96, classes=10)
        >>> model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    """
    try:
        kind = ModelName(name)
    except ValueError:
        raise InvalidArgumentError(
            f"model={name!r}: choose one of {', '.join(m.value for m in ModelName)}") from None
    if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < MIN_MODEL_IMAGE_SIZE:
        raise InvalidArgumentError(f"image_size={image_size!r}: expected an int >= "
                                   f"{MIN_MODEL_IMAGE_SIZE} (the CNN "
                                   "halves it four times)")
    if isinstance(classes, bool) or not isinstance(classes, int) or classes < 2:
        raise InvalidArgumentError(f"classes={classes!r}: expected an int >= 2")
    return MODELS[kind](image_size, classes)
