"""BMPs judged as TensorFlow's decoder judges them, without it.

TensorFlow 2.21's BMP decoder (``DecodeBmpV2`` in ``decode_image_op.cc``) is a few lines of
header reading: it takes the pixel data offset (byte 10), width (18), height (22) and bits per
pixel (28) and nothing else (not the header's size, compression or palette), and decodes
``bits // 8`` bytes per pixel, rows padded to 4 bytes, bottom-up (or top-down for a negative
height). It refuses a BMP when:

- the file is under 32 bytes;
- ``bits // 8`` is not 1, 3 or 4 (so 8-, 24- and 32-bit BMPs are read, and 1-, 4- and 16-bit
  ones are not; an 8-bit BMP is read as grey levels, its palette ignored);
- the width is not positive, the height is zero, or the offset is negative;
- width x height is ``(2**31 - 1) // 8`` pixels or more;
- the file size is not exactly the offset plus the rows: a BMP cut short, with bytes after its
  rows, or compressed (RLE) is refused.

This module checks exactly that (``tests/records/test_bmp_check.py`` holds it to TensorFlow's
verdicts). OS/2 BMPs (a 12-byte header, 16-bit sides) are refused too: TensorFlow reads their
fields at the Windows header's offsets, and what it decodes, if anything, does not have their
size.
"""

from __future__ import annotations

import struct

from tfopt.records.image_limits import TF_MAX_BMP_PIXELS


def bmp_problem(data: bytes) -> str | None:
    """Why TensorFlow's decoder refuses this BMP, or None when it decodes it (at the size
    :func:`tfopt.records.image_header.image_size` reads)."""
    if len(data) < 32:
        return f"cut short: {len(data)} bytes, the header alone takes 32"
    (offset,) = struct.unpack_from("<i", data, 10)
    (header_size,) = struct.unpack_from("<I", data, 14)
    width, height = struct.unpack_from("<ii", data, 18)
    (bits,) = struct.unpack_from("<h", data, 28)
    if header_size == 12:
        return ("an OS/2 BMP (12-byte header): TensorFlow's decoder reads the fields of the "
                "Windows headers only")
    channels = abs(bits) // 8 * (1 if bits >= 0 else -1)  # C's division, toward zero
    if channels not in (1, 3, 4):
        return (f"{bits} bits per pixel: TensorFlow's BMP decoder reads 8-, 24- and 32-bit "
                "pixels only")
    if width <= 0:
        return f"width {width}: TensorFlow's BMP decoder needs a positive width"
    if height == 0:
        return "height 0"
    if offset < 0:
        return f"pixel data offset {offset}: negative"
    pixels = width * abs(height)
    if pixels >= TF_MAX_BMP_PIXELS:
        return (f"{width}x{abs(height)} px = {pixels:,} pixels: TensorFlow refuses to decode "
                f"BMPs of {TF_MAX_BMP_PIXELS:,} pixels or more")
    row_bytes = (channels * width + 3) // 4 * 4
    expected = offset + row_bytes * abs(height)
    if len(data) != expected:
        (compression,) = struct.unpack_from("<I", data, 30) if len(data) >= 34 else (0,)
        why = ("cut short" if len(data) < expected
               else f"{len(data) - expected:,} bytes after its pixel rows")
        if compression not in (0, 3):  # not plain or bit-field pixels: RLE, JPEG or PNG data
            why = f"compressed (compression type {compression}), which TensorFlow does not read"
        return (f"{len(data):,} bytes where its header implies {expected:,} (pixel data at "
                f"byte {offset:,}, {abs(height):,} rows of {row_bytes:,} bytes): {why}")
    return None
