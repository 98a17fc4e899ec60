"""Decoded-size limits, read from an image's header before anything is decoded.

TensorFlow 2.21's decoders refuse some images for their size alone, before they allocate:

- a JPEG whose decoded size, width x height x the file's components (1, 3 or 4), is 2**29
  bytes or more: it logs "Image too large" and raises "Invalid JPEG data or crop window";
- a PNG of 2**29 pixels or more, or with a side of 2**27 px or more ("PNG size too large for
  int");
- a BMP of (2**31 - 1) // 8 pixels or more ("Total possible pixel bytes must be less than
  2^30").

Below those it decodes whatever it is given: a one-colour 20000x20000 PNG is 1.2 MB on disk
and 1.2 GB decoded, every time a pipeline reads it. tfopt's pixel limit (``convert``'s
``max_pixels``) refuses such images too; by default it is TensorFlow's JPEG limit at the 3
channels tfopt's pipelines decode to. Both are judged from the header, so a refused image
costs no memory.

Example:
    >>> header_problem(data, ImageFormat.PNG, 20000, 20000, max_pixels=DEFAULT_MAX_PIXELS)
    '20000x20000 px = 400,000,000 pixels, 1.2 GB decoded as RGB: over the limit of ...'
"""

from __future__ import annotations

from collections.abc import Callable

from tfopt._text import human_bytes
from tfopt.records.image_header import (
    ImageFormat,
    image_size,
    jpeg_frame,
    jpeg_frame_problem,
    sniff_format,
)

TF_MAX_JPEG_BYTES = 1 << 29  # width x height x components, at the scale decoded
TF_MAX_PNG_PIXELS = 1 << 29
TF_MAX_PNG_SIDE = 1 << 27
TF_MAX_BMP_PIXELS = ((1 << 31) - 1) // 8
# tfopt's pipelines decode every image to RGB (channels=3)
DECODED_CHANNELS = 3
# The most pixels an RGB JPEG may have for TensorFlow to decode it whole: 178,956,970
DEFAULT_MAX_PIXELS = (TF_MAX_JPEG_BYTES - 1) // DECODED_CHANNELS


def header_problem(data: bytes, image_format: ImageFormat, height: int, width: int, *,
                   max_pixels: int | None) -> str | None:
    """Why an image cannot, or must not, be decoded, judged from its header; None if it may.

    First what TensorFlow's decoder refuses (a JPEG's frame type, precision or sides; any
    format's decoded size: see the module docstring), then ``max_pixels``.

    Args:
        data: The encoded image (a JPEG's frame header can come after tens of KB of metadata).
        image_format: Its format, as sniffed.
        height: Its height, from :func:`image_size`.
        width: Its width.
        max_pixels: The most pixels (height x width) allowed, or None for TensorFlow's limits
            alone.
    """
    if image_format is ImageFormat.JPEG:
        frame = jpeg_frame(data)
        problem = jpeg_frame_problem(frame.marker, frame.precision, height, width)
        if problem:
            return problem
        decoded = height * width * frame.components
        if decoded >= TF_MAX_JPEG_BYTES:
            return (f"decoded size {width}x{height}x{frame.components} = {human_bytes(decoded)}: "
                    f"TensorFlow refuses to decode JPEGs of 2**29 bytes "
                    f"({human_bytes(TF_MAX_JPEG_BYTES)}) or more (\"Image too large\")")
    pixels = height * width
    if image_format is ImageFormat.PNG:
        if max(height, width) >= TF_MAX_PNG_SIDE:
            return (f"{width}x{height} px: TensorFlow refuses to decode PNGs with a side of "
                    f"2**27 ({TF_MAX_PNG_SIDE:,}) px or more")
        if pixels >= TF_MAX_PNG_PIXELS:
            return (f"{width}x{height} px = {pixels:,} pixels: TensorFlow refuses to decode "
                    f"PNGs of 2**29 ({TF_MAX_PNG_PIXELS:,}) pixels or more")
    if image_format is ImageFormat.BMP and pixels >= TF_MAX_BMP_PIXELS:
        return (f"{width}x{height} px = {pixels:,} pixels: TensorFlow refuses to decode BMPs "
                f"of {TF_MAX_BMP_PIXELS:,} pixels or more")
    if max_pixels is not None and pixels > max_pixels:
        return (f"{width}x{height} px = {pixels:,} pixels, "
                f"{human_bytes(pixels * DECODED_CHANNELS)} decoded as RGB: over the limit of "
                f"{max_pixels:,} pixels (convert's max_pixels, --max-pixels)")
    return None


def encoded_image_problem(data: bytes, *, max_pixels: int | None) -> str | None:
    """:func:`header_problem` for bytes of any format: not an image, a malformed header, or
    what the header shows (verify's check of each stored image)."""
    image_format = sniff_format(data)
    if image_format is None:
        return f"not a JPEG, PNG, GIF or BMP image (starts with {data[:8]!r})"
    try:
        height, width = image_size(data, image_format)
        return header_problem(data, image_format, height, width, max_pixels=max_pixels)
    except ValueError as error:
        return f"malformed {image_format.value} header: {error}"


def recorded_max_pixels(options: dict) -> int | None:
    """The pixel limit a dataset was converted with, from its manifest's options: the default
    for manifests written before the option existed (or holding a value that is not one)."""
    if not isinstance(options, dict):
        return DEFAULT_MAX_PIXELS
    value = options.get("max_pixels", DEFAULT_MAX_PIXELS)
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value
    return DEFAULT_MAX_PIXELS


def record_image_check(image_key: str, max_pixels: int | None) -> Callable[[bytes], str | None]:
    """A function ``serialized tf.train.Example -> problem or None`` that judges the image of
    each record by its header (:func:`encoded_image_problem`)."""
    from google.protobuf.message import DecodeError

    from tfopt.records.format.example_pb import example_classes

    parse = example_classes().Example.FromString

    def check(record: bytes) -> str | None:
        try:
            features = parse(record).features.feature
        except DecodeError:
            return "not a tf.train.Example"
        if image_key not in features:
            return f"no image feature {image_key!r}"
        values = features[image_key].bytes_list.value
        if len(values) != 1:
            return f"image feature {image_key!r} holds {len(values)} byte strings, not 1"
        problem = encoded_image_problem(values[0], max_pixels=max_pixels)
        return f"image {image_key!r}: {problem}" if problem else None

    return check
