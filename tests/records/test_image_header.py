"""Image format and size from headers, without decoding."""

from __future__ import annotations

import pytest
from conftest import GIF_1X1, encode_bmp, encode_jpeg, encode_png, random_pixels

from tfopt.records.image_header import ImageFormat, image_size, sniff_format


@pytest.mark.parametrize(
    "encode, image_format",
    [(encode_jpeg, ImageFormat.JPEG), (encode_png, ImageFormat.PNG), (encode_bmp, ImageFormat.BMP)],
)
def test_size_and_format_match_the_pixels(encode, image_format):
    data = encode(random_pixels(0, 37, 91))
    assert sniff_format(data) is image_format
    assert image_size(data) == (37, 91)


def test_progressive_jpeg_and_gif(tf):
    pixels = random_pixels(1, 50, 20)
    progressive = tf.io.encode_jpeg(pixels, progressive=True).numpy()
    assert image_size(progressive) == (50, 20)
    assert sniff_format(GIF_1X1) is ImageFormat.GIF and image_size(GIF_1X1) == (1, 1)


def test_unknown_and_cut_headers_raise():
    assert sniff_format(b"hello world, not an image") is None
    with pytest.raises(ValueError, match="not a JPEG"):
        image_size(b"hello world")
    jpeg = encode_jpeg(random_pixels(2))
    with pytest.raises(ValueError, match="truncated"):
        image_size(jpeg[:30])
    png = encode_png(random_pixels(3))
    with pytest.raises(ValueError, match="cut short"):
        image_size(png[:18])
