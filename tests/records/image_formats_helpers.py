"""GIFs and BMPs built byte by byte (TensorFlow writes neither), small JPEG fixtures it cannot
write either, and TensorFlow's verdict on an image, as tfopt's ``--check decode`` takes it."""

from __future__ import annotations

import struct
from pathlib import Path

DATA = Path(__file__).parent / "data"

# Made once with jpegtran 2.1.5 (Debian's libjpeg-turbo-progs) from a 64x48 JPEG written by
# tf.io.encode_jpeg (its grey channel for the grey one): `jpegtran -arithmetic`, plus
# `-progressive` or `-restart N`; progressive_restart.jpg is `jpegtran -progressive -restart 1`.
JPEG_FIXTURES = ("arithmetic.jpg", "arithmetic_progressive.jpg", "arithmetic_restart.jpg",
                 "arithmetic_progressive_grey.jpg", "progressive_restart.jpg")


def fixture_jpeg(name: str) -> bytes:
    return (DATA / name).read_bytes()


def tensorflow_decodes(tf, data: bytes) -> bool:
    """TensorFlow decodes ``data`` as tfopt's pipelines do, at the size its header gives."""
    from tfopt.records.image_header import image_size

    try:
        decoded = tf.io.decode_image(data, channels=3, expand_animations=False)
    except tf.errors.OpError:
        return False
    try:
        return tuple(decoded.shape[:2]) == image_size(data)
    except ValueError:
        return False


# ---- GIF -----------------------------------------------------------------------------------

def lzw_codes(pixels, code_size: int) -> list[tuple[int, int]]:
    """``[(code, width in bits)]``: GIF LZW of ``pixels``, a clear code first and whenever the
    table is full, the end-of-information code last."""
    clear, end = 1 << code_size, (1 << code_size) + 1
    fresh = {bytes([value]): value for value in range(clear)}
    table = dict(fresh)
    codes = [(clear, code_size + 1)]
    width, next_code = code_size + 1, end + 1
    string = b""
    for value in pixels:
        longer = string + bytes([value])
        if longer in table:
            string = longer
            continue
        codes.append((table[string], width))
        table[longer] = next_code
        next_code += 1
        # the decoder defines each entry one code later than this encoder: it widens then
        if next_code > 1 << width and width < 12:
            width += 1
        elif next_code == 4096:
            codes.append((clear, width))
            table, width, next_code = dict(fresh), code_size + 1, end + 1
        string = bytes([value])
    if string:
        codes.append((table[string], width))
    codes.append((end, width))
    return codes


def pack_codes(codes) -> bytes:
    """LZW codes into GIF's bit order: least significant bit first."""
    value = bits = 0
    packed = bytearray()
    for code, width in codes:
        value |= code << bits
        bits += width
        while bits >= 8:
            packed.append(value & 0xFF)
            value >>= 8
            bits -= 8
    if bits:
        packed.append(value)
    return bytes(packed)


def sub_blocks(data: bytes) -> bytes:
    return b"".join(bytes([len(data[i:i + 255])]) + data[i:i + 255]
                    for i in range(0, len(data), 255)) + b"\0"


def _colour_table(colours) -> tuple[int, bytes]:
    """The size field for ``colours`` and the table, padded to a power of two."""
    bits = max(1, (len(colours) - 1).bit_length())
    padded = list(colours) + [(0, 0, 0)] * ((1 << bits) - len(colours))
    return bits - 1, b"".join(bytes(colour) for colour in padded)


def gif_frame(pixels, width: int, height: int, *, left: int = 0, top: int = 0,
              code_size: int = 2, colours=None, interlaced: bool = False,
              image_data: bytes | None = None, transparent: int | None = None) -> bytes:
    """A frame: a graphic control extension if ``transparent`` is given, the descriptor, a
    local colour table if ``colours`` are given, and ``pixels`` (in display order, rows
    stored in interlaced order if asked) LZW-coded, or ``image_data`` as it is."""
    flags, table = 0x40 if interlaced else 0, b""
    if colours is not None:
        size, table = _colour_table(colours)
        flags |= 0x80 | size
    control = b"" if transparent is None else b"!\xf9\x04\x01\x00\x00" + bytes([transparent]) + b"\0"
    if image_data is None:
        rows = [pixels[row * width:(row + 1) * width] for row in range(height)]
        if interlaced:
            order = [row for first, step in ((0, 8), (4, 8), (2, 4), (1, 2))
                     for row in range(first, height, step)]
            rows = [rows[row] for row in order]
        image_data = pack_codes(lzw_codes([value for row in rows for value in row], code_size))
    return (control + b"," + struct.pack("<HHHHB", left, top, width, height, flags) + table
            + bytes([code_size]) + sub_blocks(image_data))


def gif(width: int, height: int, frames, *, colours=((0, 0, 0), (255, 255, 255)),
        trailer: bool = True) -> bytes:
    """A GIF89a of ``frames`` (from :func:`gif_frame`) on a ``width`` x ``height`` screen with
    a global colour table of ``colours`` (None for none)."""
    flags, table = 0, b""
    if colours is not None:
        size, table = _colour_table(colours)
        flags = 0x80 | size
    return (b"GIF89a" + struct.pack("<HHBBB", width, height, flags, 0, 0) + table
            + b"".join(frames) + (b";" if trailer else b""))


def checkered(width: int, height: int, colours: int = 2) -> list[int]:
    return [(x + y) % colours for y in range(height) for x in range(width)]


def one_colour_gif(width: int, height: int) -> bytes:
    """A whole GIF of one colour, as large as wanted and small on disk: its LZW codes are
    written out directly (after a clear code, pixel 0, then each code the entry being defined:
    the previous string plus one pixel), not searched for."""
    clear, end, first_free = 4, 5, 6
    count, produced, bits = width * height, 0, 3
    codes = []
    while produced < count:  # one table's worth of ever longer strings, then a clear code
        codes.append((clear, bits))
        bits, running_code = 3, first_free
        code, length = 0, 1
        while produced < count and code < 4095:
            codes.append((code, bits))
            produced += length
            # the decoder counts each code it reads and widens the next past 2**bits
            running_code += 1
            if running_code > 1 << bits and bits < 12:
                bits += 1
            code, length = running_code - 1, length + 1
    codes.append((end, bits))
    return gif(width, height, [gif_frame(None, width, height, image_data=pack_codes(codes))])


# ---- BMP -----------------------------------------------------------------------------------

def bmp(width: int, height: int, bits: int = 24, *, compression: int = 0, header: int = 40,
        offset: int | None = None, palette: int = 0, pixels: bytes | None = None,
        after: bytes = b"") -> bytes:
    """A BMP of ``bits`` per pixel (zero pixels unless given), rows padded to 4 bytes,
    ``height`` < 0 for top-down rows, a ``header``-byte info header (12: OS/2's), a palette of
    ``palette`` entries and ``after`` appended."""
    row_bytes = (abs(width) * bits + 31) // 32 * 4
    pixels = bytes(row_bytes * abs(height)) if pixels is None else pixels
    if header == 12:
        info = struct.pack("<IHHHH", 12, width, height, 1, bits)
    else:
        info = struct.pack("<IiiHHIIiiII", header, width, height, 1, bits, compression,
                           len(pixels), 2835, 2835, palette, 0) + bytes(header - 40)
    table = bytes(4 * palette)
    start = 14 + len(info) + len(table) if offset is None else offset
    body = info + table + pixels + after
    return struct.pack("<2sIHHI", b"BM", 14 + len(body), 0, 0, start) + body
