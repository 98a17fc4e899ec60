"""Images that claim what they like, built byte by byte at test time: JPEGs of any size, frame
type, precision or sampling; PNGs of one colour as large as wanted yet small on disk; BMP and
GIF headers. None of them is ever decoded whole by the tests."""

from __future__ import annotations

import struct
import zlib


def _segment(marker: int, body: bytes) -> bytes:
    return bytes([0xFF, marker]) + struct.pack(">H", len(body) + 2) + body


def handmade_jpeg(width: int, height: int, *, components: int = 3, marker: int = 0xC0,
                  precision: int = 8, sampling: tuple[int, ...] | None = None,
                  extra: bytes = b"") -> bytes:
    """A JPEG whose every segment is whole: one quantization table, one DC and one AC Huffman
    table of a single one-bit code each (so zero bits decode as flat grey blocks: each block is
    "DC difference 0, end of block"), a scan over every component and 64 bytes of image data.

    Larger images than the data covers are cut short inside their image data, which TensorFlow's
    decoder tolerates (it warns, "premature end of data segment") and the structure walk does
    not look into: what is judged is the header.

    Args:
        width, height: The size the frame header claims.
        components: 1 (grey) or 3.
        marker: The start-of-frame marker: 0xC0 baseline, 0xC3 lossless, 0xC9 arithmetic...
        precision: The sample precision byte.
        sampling: Each component's sampling factors byte (0x22: 2x2). Defaults to 0x11 each.
        extra: Segments placed before the frame header.
    """
    sampling = sampling or (0x11,) * components
    frame = struct.pack(">BHHB", precision, height, width, components) + b"".join(
        bytes([index + 1, sampling[index], 0]) for index in range(components))
    one_code = bytes([1] + [0] * 15) + b"\x00"  # one code of length 1, for symbol 0
    scan = bytes([components]) + b"".join(bytes([index + 1, 0x00]) for index in range(components))
    return (b"\xff\xd8" + extra + _segment(0xDB, b"\x00" + bytes([1] * 64))
            + _segment(marker, frame)
            + _segment(0xC4, b"\x00" + one_code + b"\x10" + one_code)
            + _segment(0xDA, scan + b"\x00\x3f\x00") + bytes(64) + b"\xff\xd9")


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_header(width: int, height: int, *, colour_type: int = 2, depth: int = 8,
               image_data: bytes = b"") -> bytes:
    """A PNG signature and IHDR, then an IDAT of ``image_data`` (if any) and IEND."""
    ihdr = struct.pack(">IIBBBBB", width, height, depth, colour_type, 0, 0, 0)
    idat = _png_chunk(b"IDAT", image_data) if image_data else b""
    return b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + idat + _png_chunk(b"IEND", b"")


def one_colour_png(width: int, height: int, *, colour_type: int = 2) -> bytes:
    """A whole 8-bit PNG of one colour (every sample 0), small on disk however large.

    Its inflated data is one run of zeros (filter type 0 is a zero byte too). A run of rows is
    deflated once and its bytes repeated: a full flush makes the piece byte-aligned and
    independent of what came before it, so copies of it chain into one valid stream.
    """
    channels = {0: 1, 2: 3, 4: 2, 6: 4}[colour_type]
    row = 1 + width * channels
    rows_per_piece = max(1, min(height, (4 << 20) // row))
    pieces, rest = divmod(height, rows_per_piece)
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    piece = compressor.compress(bytes(row * rows_per_piece)) + compressor.flush(zlib.Z_FULL_FLUSH)
    last = zlib.compressobj(9, zlib.DEFLATED, -15)
    tail = last.compress(bytes(row * rest)) + last.flush()
    total = row * height
    adler = ((total % 65521) << 16) | 1  # Adler-32 of zeros: a stays 1, b counts the bytes
    stream = b"\x78\xda" + piece * pieces + tail + struct.pack(">I", adler)
    return png_header(width, height, colour_type=colour_type, image_data=stream)


def bmp_header(width: int, height: int) -> bytes:
    """The 54 bytes of a 24-bit BMP's headers (no pixel data)."""
    row_bytes = (width * 3 + 3) // 4 * 4
    size = 54 + row_bytes * height
    return (struct.pack("<2sIHHI", b"BM", size & 0xFFFFFFFF, 0, 0, 54)
            + struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, 0, 2835, 2835, 0, 0))


def gif_header(width: int, height: int) -> bytes:
    """A GIF's signature and logical screen descriptor claiming ``width`` x ``height``."""
    return b"GIF89a" + struct.pack("<HHBBB", width, height, 0, 0, 0) + b";"
