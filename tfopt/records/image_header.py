"""Image formats and sizes read from the first bytes of an encoded image, without decoding.

Pure Python: conversion planning and ``inspect`` use it on thousands of files, where a decode
would cost milliseconds each and a header read costs microseconds.
"""

from __future__ import annotations

import enum
import struct


class ImageFormat(str, enum.Enum):
    """Encoded image formats that TensorFlow's ``decode_image`` reads."""

    JPEG = "jpeg"
    PNG = "png"
    GIF = "gif"
    BMP = "bmp"


# File extensions (lower case) accepted in an image folder, and the format each one promises.
IMAGE_EXTENSIONS = {
    ".jpg": ImageFormat.JPEG,
    ".jpeg": ImageFormat.JPEG,
    ".jpe": ImageFormat.JPEG,
    ".png": ImageFormat.PNG,
    ".gif": ImageFormat.GIF,
    ".bmp": ImageFormat.BMP,
}

_SIGNATURES = (
    (b"\xff\xd8\xff", ImageFormat.JPEG),
    (b"\x89PNG\r\n\x1a\n", ImageFormat.PNG),
    (b"GIF87a", ImageFormat.GIF),
    (b"GIF89a", ImageFormat.GIF),
    (b"BM", ImageFormat.BMP),
)

# JPEG start-of-frame markers (baseline, progressive, lossless, arithmetic...) carry the size.
# 0xC4 (DHT), 0xC8 (JPG) and 0xCC (DAC) share the range but are not frames.
_JPEG_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# Markers that stand alone, without a length field.
_JPEG_STANDALONE = frozenset(range(0xD0, 0xD8)) | {0x01, 0xD8}


def sniff_format(data: bytes) -> ImageFormat | None:
    """The image format that ``data`` starts with, or None when it is not a known image."""
    for signature, image_format in _SIGNATURES:
        if data.startswith(signature):
            if image_format is ImageFormat.BMP and len(data) < 26:
                return None  # "BM" alone is too weak a signature for tiny files
            return image_format
    return None


def image_size(data: bytes, image_format: ImageFormat | None = None) -> tuple[int, int]:
    """``(height, width)`` read from the header of an encoded image.

    Args:
        data: The encoded image, or at least its first bytes (JPEG headers can be long: pass
            the whole file when in doubt).
        image_format: Its format. Defaults to sniffing it from ``data``.

    Raises:
        ValueError: ``data`` is not a known image or its header is cut short or malformed.
    """
    image_format = image_format or sniff_format(data)
    try:
        if image_format is ImageFormat.JPEG:
            return _jpeg_size(data)
        if image_format is ImageFormat.PNG:
            if data[12:16] != b"IHDR":
                raise ValueError("PNG without an IHDR chunk")
            width, height = struct.unpack(">II", data[16:24])
            return height, width
        if image_format is ImageFormat.GIF:
            width, height = struct.unpack("<HH", data[6:10])
            return height, width
        if image_format is ImageFormat.BMP:
            (header_size,) = struct.unpack("<I", data[14:18])
            if header_size == 12:  # OS/2 BITMAPCOREHEADER: 16-bit sizes
                width, height = struct.unpack("<HH", data[18:22])
            else:  # BITMAPINFOHEADER and later: signed, negative height = top-down rows
                width, height = struct.unpack("<ii", data[18:26])
            return abs(height), abs(width)
    except struct.error as error:
        raise ValueError(f"{image_format.value} header is cut short") from error
    raise ValueError("not a JPEG, PNG, GIF or BMP image")


def _jpeg_size(data: bytes) -> tuple[int, int]:
    position = 2  # after the SOI marker FF D8
    end = len(data)
    while position + 4 <= end:
        if data[position] != 0xFF:
            raise ValueError(f"JPEG marker expected at byte {position}")
        marker = data[position + 1]
        if marker == 0xFF:  # fill byte before a marker
            position += 1
            continue
        if marker in _JPEG_STANDALONE:
            position += 2
            continue
        (length,) = struct.unpack(">H", data[position + 2 : position + 4])
        if marker in _JPEG_SOF_MARKERS:
            if position + 9 > end:
                break
            height, width = struct.unpack(">HH", data[position + 5 : position + 9])
            return height, width
        position += 2 + length
    raise ValueError("JPEG header ends before its frame size (truncated file?)")
