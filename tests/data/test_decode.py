"""Each JPEG decodes at its own reduced scale: camera-sized and small images in one stream."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from conftest import encode_jpeg

from tfopt.data.decode import decode_full, decode_jpeg_scaled
from tfopt.data.plan import choose_decode
from tfopt.data.sizes import jpeg_image_ratio


def smooth_jpeg(height: int, width: int) -> bytes:
    ramp = np.linspace(0, 255, width, dtype=np.float32)[None, :, None]
    return encode_jpeg(np.broadcast_to(ramp, (height, width, 3)).astype(np.uint8), quality=80)


# (height, width) -> ratio at a 256-px kept side: 2,100 px / 8 = 263 keeps it, 1,400 / 8 = 175
# does not (1/4: 350); 2,041 / 8 rounds up to 256; 300 px needs the whole image
SIZES = {(2100, 3000): 8, (3000, 2100): 8, (1400, 2100): 4, (2041, 2041): 8, (2040, 2040): 4,
         (600, 800): 2, (300, 400): 1}


@pytest.mark.parametrize(("size", "ratio"), SIZES.items())
def test_each_jpeg_decodes_at_the_largest_scale_that_keeps_the_side(size, ratio):
    height, width = size
    encoded = smooth_jpeg(height, width)
    assert jpeg_image_ratio(height, width, 256) == ratio  # the planner's count, in Python
    image = tf.function(lambda data: decode_jpeg_scaled(data, 256))(tf.constant(encoded))
    assert image.shape == (-(-height // ratio), -(-width // ratio), 3)
    assert min(image.shape[:2]) >= min(256, min(size))
    # the very pixels TensorFlow's decoder gives at that ratio
    expected = tf.io.decode_jpeg(encoded, channels=3, ratio=ratio)
    assert np.array_equal(image.numpy(), expected.numpy())


def test_the_cache_plan_decodes_per_image_and_a_plain_plan_does_not():
    cached = choose_decode(encoding="jpeg", random_crop=True, target=(224, 224), min_side=1400,
                           cache_decoded=True)
    # the smallest sampled photo allows 1/4; a larger one in the same stream goes to 1/8
    assert cached.ratio == 4 and cached.min_decoded_side == 256
    big = tf.constant(smooth_jpeg(2100, 3000))
    assert decode_full(big, cached).shape == (263, 375, 3)
    pngs = choose_decode(encoding="png", random_crop=True, target=(224, 224), min_side=1400,
                         cache_decoded=True)
    assert pngs.min_decoded_side is None
    # evaluation keeps the central 87.5 % square above the target: 224 / 0.875 = 256 px
    evaluation = choose_decode(encoding="jpeg", random_crop=False, target=(224, 224),
                               min_side=1400, cache_decoded=False)
    assert evaluation.min_decoded_side == 256 and evaluation.ratio == 4
