"""AugmentConfig: invalid values named, defaults, replace."""

from __future__ import annotations

import pytest

from tfopt._tf import import_tensorflow

tf = import_tensorflow()
from augment_helpers import uint8_batch  # noqa: E402

from tfopt.data.augment.config import IMAGENET_MEAN, IMAGENET_STD, AugmentConfig  # noqa: E402
from tfopt.data.augment.functional import (  # noqa: E402
    augment_batch,
)
from tfopt.data.augment.layer import Augment  # noqa: E402
from tfopt.errors import InvalidArgumentError  # noqa: E402


@pytest.mark.parametrize("field, value", [
    ("output_size", 0),
    ("output_size", (224, 224, 3)),
    ("random_crop", "yes"),
    ("crop_scale", (0.5, 0.1)),
    ("crop_scale", (0.0, 1.0)),
    ("crop_ratio", (0, 1)),
    ("horizontal_flip", 1.5),
    ("vertical_flip", -0.1),
    ("brightness", -0.1),
    ("contrast", 2.0),
    ("saturation", "a lot"),
    ("normalization", "imagenet21k"),
    ("input_max", 0),
    ("mixup_alpha", -1.0),
    ("cutmix_alpha", float("nan")),
    ("num_classes", 1),
    ("output_dtype", "int32"),
])
def test_invalid_values_name_the_field(field, value):
    with pytest.raises(InvalidArgumentError, match=f"{field}=") as error:
        AugmentConfig(**{field: value})
    assert repr(value)[:6] in str(error.value) or str(value)[:6] in str(error.value)
    with pytest.raises(InvalidArgumentError, match=field):
        AugmentConfig().replace(**{field: value})


def test_invalid_mean_std_and_options():
    with pytest.raises(InvalidArgumentError, match="std"):
        AugmentConfig(mean=(1.0, 2.0, 3.0), std=(1.0, 0.0, 1.0))
    with pytest.raises(InvalidArgumentError, match="give both"):
        AugmentConfig(mean=(1.0, 2.0, 3.0))
    with pytest.raises(InvalidArgumentError, match="normalization='unit'"):
        AugmentConfig(normalization="unit", mean=0.0, std=1.0)
    with pytest.raises(InvalidArgumentError, match="2 values for 3-channel"):
        augment_batch(uint8_batch(), mean=(1.0, 2.0), std=(1.0, 1.0))
    # named with the function it was given to, and the known fields
    with pytest.raises(InvalidArgumentError, match=r"augment_batch: unknown option\(s\) "
                                                   r"brightnes; expected one of: output_size"):
        augment_batch(uint8_batch(), brightnes=0.2)
    with pytest.raises(InvalidArgumentError, match=r"Augment: unknown option\(s\) brightnes; "
                                                   r"expected one of: output_size.*, name"):
        Augment(brightnes=0.2)
    with pytest.raises(InvalidArgumentError, match="seed="):
        augment_batch(uint8_batch(), seed=[1, 2, 3])
    with pytest.raises(InvalidArgumentError, match="images"):
        augment_batch(tf.zeros([8, 8, 3], tf.uint8))
    with pytest.raises(InvalidArgumentError, match="int32"):
        augment_batch(tf.zeros([2, 8, 8, 3], tf.int32))


def test_config_defaults_and_replace():
    config = AugmentConfig(output_size=224, horizontal_flip=True, crop_scale=[0.2, 1])
    assert config.output_size == (224, 224)
    assert config.horizontal_flip == 0.5 and config.vertical_flip == 0.0
    assert config.crop_scale == (0.2, 1.0)
    assert config.mean_std == (IMAGENET_MEAN, IMAGENET_STD)
    assert config.replace(normalization="unit").mean_std == ((0.0,), (255.0,))
    assert config.replace(output_dtype=tf.float16).output_dtype == "float16"
    assert not config.mixes and config.replace(cutmix_alpha=1.0).mixes
    assert config.is_random and not AugmentConfig(horizontal_flip=0.0).is_random
