"""Image format and size from headers, without decoding."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
from conftest import GIF_1X1, encode_bmp, encode_jpeg, encode_png, random_pixels
from hostile_images_helpers import handmade_jpeg
from image_formats_helpers import JPEG_FIXTURES, fixture_jpeg

from tfopt.records.image_header import (
    ImageFormat,
    JpegFrame,
    image_size,
    jpeg_frame,
    jpeg_structure,
    png_problem,
    sniff_format,
)


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


def _jpeg_variants(tf):
    """Valid JPEGs as encoders write them: baseline, progressive, grayscale, 4:4:4, metadata."""
    pixels = np.random.default_rng(7).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    smooth = np.linspace(0, 255, 48 * 64 * 3).reshape(48, 64, 3).astype(np.uint8)
    variants = []
    for image in (pixels, smooth):
        variants += [
            tf.io.encode_jpeg(image, quality=95).numpy(),
            tf.io.encode_jpeg(image, quality=30, progressive=True).numpy(),
            tf.io.encode_jpeg(image, chroma_downsampling=False, optimize_size=True).numpy(),
            tf.io.encode_jpeg(image[..., :1], quality=80).numpy(),
            tf.io.encode_jpeg(image, density_unit="cm", x_density=118, y_density=118,
                              xmp_metadata="<x:xmpmeta>tfopt</x:xmpmeta>").numpy(),
        ]
    return variants


def _scan_headers(data: bytes) -> list[tuple[int, int]]:
    """``(start, length)`` of each scan header's body in a JPEG."""
    found, position = [], 0
    while (position := data.find(b"\xff\xda", position)) >= 0:
        found.append((position + 4, (data[position + 2] << 8 | data[position + 3]) - 2))
        position += 2
    return found


def test_structure_check_rejects_every_jpeg_the_decoder_rejects(tf):
    """Differential test: random damage to valid JPEGs, judged by TensorFlow and by tfopt.

    Sequential, progressive (TensorFlow's encoder writes those) and arithmetic-coded ones (the
    fixtures), with restart markers or without; damage anywhere, and in the scan headers,
    whose components, bands and bits decide what a progressive decoder does.
    """
    rng = np.random.default_rng(2026)

    def decoder_rejects(data):
        try:
            tf.io.decode_jpeg(data)
        except tf.errors.OpError:
            return True
        return False

    rejected_by_decoder = 0
    originals = _jpeg_variants(tf) + [fixture_jpeg(name) for name in JPEG_FIXTURES]
    for original in originals:
        assert jpeg_structure(original).problem is None
        assert not jpeg_structure(original).needs_decode
        assert not decoder_rejects(original)
        size = len(original)
        scans = _scan_headers(original)
        for trial in range(42):
            damaged = bytearray(original)
            kind = trial % 7
            if kind == 0:  # cut short
                damaged = damaged[: int(rng.integers(2, size - 1))]
            elif kind == 1:  # a run of garbage
                start = int(rng.integers(2, size - 40))
                damaged[start : start + 40] = rng.integers(0, 256, 40, dtype=np.uint8).tobytes()
            elif kind == 2:  # one byte in the headers (tables, frame, scan)
                position = int(rng.integers(2, min(size, 700)))
                damaged[position] ^= int(rng.integers(1, 256))
            elif kind == 3:  # zeros
                start = int(rng.integers(2, size - 40))
                damaged[start : start + 40] = bytes(40)
            elif kind == 4:  # cut short, then an end marker pasted on
                damaged = damaged[: int(rng.integers(2, size - 1))] + b"\xff\xd9"
            else:  # a byte of a scan header: a new value, or one bit flipped
                start, length = scans[int(rng.integers(0, len(scans)))]
                position = start + int(rng.integers(0, length))
                damaged[position] = (int(rng.integers(0, 256)) if kind == 5
                                     else damaged[position] ^ 1 << int(rng.integers(0, 8)))
            damaged = bytes(damaged)
            assert not jpeg_structure(damaged).needs_decode
            if decoder_rejects(damaged):
                rejected_by_decoder += 1
                assert jpeg_structure(damaged).problem, (trial, damaged[:16])
    assert rejected_by_decoder > 250  # the damage was real enough to matter


def _png_chunks(data: bytes):
    position, chunks = 8, []
    while position < len(data):
        length, kind = struct.unpack_from(">I4s", data, position)
        chunks.append((kind, data[position + 8:position + 8 + length]))
        position += 12 + length
    return chunks


def _png_of(chunks) -> bytes:
    return b"\x89PNG\r\n\x1a\n" + b"".join(
        struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        for kind, body in chunks)


def test_a_whole_png_has_no_problem(tf):
    for pixels in (random_pixels(1), random_pixels(2, 1, 1), random_pixels(3, 17, 3)):
        assert png_problem(encode_png(pixels)) is None
    grey = tf.io.encode_png(np.arange(60, dtype=np.uint16).reshape(6, 10, 1)).numpy()
    assert png_problem(grey) is None  # 16-bit grey


def test_png_damage_is_found_without_decoding():
    png = encode_png(random_pixels(4))
    chunks = _png_chunks(png)
    assert "CRC mismatch" in png_problem(png[:40] + bytes([png[40] ^ 1]) + png[41:])
    assert "cut short" in png_problem(png[:-20])
    idat = [body for kind, body in chunks if kind == b"IDAT"][0]
    others = [(kind, body) for kind, body in chunks if kind != b"IDAT"]
    shorter = zlib.compress(zlib.decompress(idat)[:-7])
    assert "inflates to" in png_problem(_png_of(others[:1] + [(b"IDAT", shorter)] + others[1:]))
    longer = zlib.compress(zlib.decompress(idat) + b"\0" * 9)
    assert "more image data" in png_problem(_png_of(others[:1] + [(b"IDAT", longer)]
                                                    + others[1:]))
    bad_filter = bytearray(zlib.decompress(idat))
    bad_filter[0] = 9
    assert "unknown filter type 9" in png_problem(
        _png_of(others[:1] + [(b"IDAT", zlib.compress(bytes(bad_filter)))] + others[1:]))
    assert "no IEND" in png_problem(_png_of(chunks[:-1]))
    header = bytearray(chunks[0][1])
    header[8] = 3  # bit depth 3
    assert "bit depth 3" in png_problem(_png_of([(b"IHDR", bytes(header))] + chunks[1:]))


def test_png_check_rejects_every_png_the_decoder_rejects(tf):
    """Random damage (CRCs made to match, so that it reaches the checks behind them): every
    PNG that TensorFlow's decoder fails on is reported by the structure check."""
    rng = np.random.default_rng(11)
    pngs = [encode_png(random_pixels(seed, 12, 20)) for seed in range(4)]
    missed = []
    for trial in range(300):
        chunks = _png_chunks(pngs[trial % 4])
        index = int(rng.integers(0, len(chunks)))
        kind, body = chunks[index]
        body = bytearray(body)
        if body and trial % 3:
            body[int(rng.integers(0, len(body)))] = int(rng.integers(0, 256))
        else:
            body = body[: int(rng.integers(0, len(body) + 1))]
        chunks[index] = (kind, bytes(body))
        data = _png_of(chunks)
        try:
            tf.io.decode_png(data).numpy()
            decodes = True
        except tf.errors.OpError:
            decodes = False
        if not decodes and png_problem(data) is None:
            missed.append(trial)
    assert missed == []


def test_the_frame_header_gives_type_precision_size_and_components():
    assert jpeg_frame(handmade_jpeg(640, 480)) == JpegFrame(0xC0, 8, 480, 640, 3)
    assert jpeg_frame(handmade_jpeg(7, 9, components=1, marker=0xC3, precision=12)) == JpegFrame(
        0xC3, 12, 9, 7, 1)
    with pytest.raises(ValueError, match="0xffc8"):  # libjpeg stops on the reserved marker
        jpeg_frame(handmade_jpeg(16, 16, extra=b"\xff\xc8\x00\x04ab"))


@pytest.mark.parametrize("jpeg, reason", [
    (handmade_jpeg(16, 16, precision=12), "12-bit JPEG: TensorFlow decodes 8-bit JPEGs only"),
    (handmade_jpeg(16, 16, precision=16), "sample precision 16 bits"),
    (handmade_jpeg(16, 16, marker=0xC3), "lossless JPEG (SOF3, marker 0xffc3)"),
    (handmade_jpeg(16, 16, marker=0xC5), "hierarchical (differential sequential) JPEG (SOF5"),
    (handmade_jpeg(16, 16, marker=0xC6), "(SOF6"),
    (handmade_jpeg(16, 16, marker=0xC7), "hierarchical lossless JPEG (SOF7"),
    (handmade_jpeg(16, 16, marker=0xCB), "lossless arithmetic-coded JPEG (SOF11"),
    (handmade_jpeg(16, 16, marker=0xCD), "(SOF13"),
    (handmade_jpeg(16, 16, marker=0xCE), "(SOF14"),
    (handmade_jpeg(16, 16, marker=0xCF), "(SOF15"),
    (handmade_jpeg(16, 16, extra=b"\xff\xc8\x00\x04ab"), "reserved marker 0xffc8 (JPG) at byte 3"),
    (handmade_jpeg(65501, 8, components=1), "sides of at most 65,500 px"),
    # 12 blocks per MCU: libjpeg's "Sampling factors too large for interleaved scan"
    (handmade_jpeg(32, 32, sampling=(0x22, 0x22, 0x22)), "more than 10 blocks per MCU"),
    # luma 3x1 beside chroma 2x1: "Fractional sampling not implemented yet"
    (handmade_jpeg(32, 32, sampling=(0x31, 0x21, 0x11)), "sampling factors 3x1, 2x1, 1x1"),
])
def test_the_walk_rejects_what_tensorflows_decoder_cannot_read(jpeg, reason):
    """tests/records/test_image_limits.py has TensorFlow refuse each of these."""
    assert reason in jpeg_structure(jpeg).problem


@pytest.mark.parametrize("jpeg", [
    handmade_jpeg(16, 16), handmade_jpeg(16, 16, marker=0xC1), handmade_jpeg(65500, 8, components=1),
    handmade_jpeg(32, 32, sampling=(0x22, 0x11, 0x11)), handmade_jpeg(32, 32, sampling=(0x22, 0x22, 0x11)),
    handmade_jpeg(48, 16, sampling=(0x31, 0x11, 0x11)),
])
def test_frames_tensorflow_reads_pass_the_walk(jpeg):
    structure = jpeg_structure(jpeg)
    assert structure.problem is None and not structure.needs_decode


def _with_scan(jpeg: bytes, scan: bytes) -> bytes:
    """``jpeg`` (a handmade one: a single scan) with another scan header body."""
    position = jpeg.index(b"\xff\xda")
    length = (jpeg[position + 2] << 8) | jpeg[position + 3]
    return (jpeg[:position + 2] + struct.pack(">H", len(scan) + 2) + scan
            + jpeg[position + 2 + length:])


def _segment(marker: int, body: bytes) -> bytes:
    return bytes([0xFF, marker]) + struct.pack(">H", len(body) + 2) + body


GREY_PROGRESSIVE = handmade_jpeg(16, 16, components=1, marker=0xC2)
PROGRESSIVE = handmade_jpeg(16, 16, marker=0xC2)
# scan bodies: components (id, DC table << 4 | AC table), then Ss, Se, Ah << 4 | Al
DC_FIRST = b"\x01\x01\x00\x00\x00\x00"
# (JPEG, what the walk says): TensorFlow refuses each (below)
WALK_REJECTS = [
    (_with_scan(PROGRESSIVE, b"\x03\x01\x00\x02\x00\x03\x00\x00\x3f\x00"),
     "progressive scan parameters Ss=0 Se=63 Ah=0 Al=0"),
    (_with_scan(handmade_jpeg(16, 16, marker=0xCA), b"\x03\x01\x00\x02\x00\x03\x00\x00\x3f\x00"),
     "progressive scan parameters Ss=0 Se=63"),  # arithmetic-coded progressive
    (_with_scan(PROGRESSIVE, b"\x03\x01\x00\x02\x00\x03\x00\x01\x3f\x00"),
     "Ss=1 Se=63 Ah=0 Al=0"),  # an AC scan of three components
    (_with_scan(GREY_PROGRESSIVE, b"\x01\x01\x00\x00\x00\x20"), "Ah=2 Al=0"),
    (_with_scan(GREY_PROGRESSIVE, b"\x01\x01\x00\x00\x00\x0e"), "Ah=0 Al=14"),
    (_with_scan(GREY_PROGRESSIVE, b"\x01\x01\x10\x00\x00\x00"),
     "DC Huffman table 1 is used, never defined"),  # no standard tables when progressive
    (_with_scan(GREY_PROGRESSIVE, b"\x01\x01\x01\x01\x3f\x00"),
     "AC Huffman table 1 is used, never defined"),
    (_with_scan(handmade_jpeg(16, 16), b"\x03\x02\x00\x01\x00\x03\x00\x00\x3f\x00"),
     "scan names component 1 out of the frame's order"),
    (_with_scan(handmade_jpeg(16, 16), b"\x02\x01\x00\x01\x00\x00\x3f\x00"),
     "scan names component 1 twice"),
    (_with_scan(handmade_jpeg(16, 16), b"\x01\x07\x00\x00\x3f\x00"),
     "scan names component 7 which the frame does not have"),
    (handmade_jpeg(16, 16, extra=_segment(0xCC, b"\x00")),
     "arithmetic conditioning segment of an odd length"),
    (handmade_jpeg(16, 16, extra=_segment(0xCC, b"\x28\x05")),
     "arithmetic conditioning table 40 (0-31 exist)"),
    (handmade_jpeg(16, 16, marker=0xC9, extra=_segment(0xCC, b"\x00\x12")),
     "value 0x12 for DC table 0: L > U"),
    (handmade_jpeg(16, 16, extra=_segment(0xDD, b"\x00\x01\x00")),
     "restart interval segment of 5 bytes, not 4"),
]
# and TensorFlow decodes each of these
WALK_PASSES = [
    _with_scan(GREY_PROGRESSIVE, DC_FIRST),
    _with_scan(GREY_PROGRESSIVE, b"\x01\x01\x30\x00\x00\x10"),  # DC refinement: no table
    _with_scan(GREY_PROGRESSIVE, b"\x01\x01\x00\x01\x05\x00"),  # AC before DC: a warning
    _with_scan(handmade_jpeg(16, 16), b"\x01\x01\x11\x00\x3f\x00"),  # standard tables
    handmade_jpeg(16, 16, marker=0xC9),
    _with_scan(handmade_jpeg(16, 16, marker=0xC9), b"\x01\x01\x23\x00\x3f\x00"),
    _with_scan(handmade_jpeg(16, 16, components=1, marker=0xCA), DC_FIRST),
    handmade_jpeg(16, 16, marker=0xC9, extra=_segment(0xCC, b"\x00\x10\x10\x05")),
    handmade_jpeg(16, 16, extra=_segment(0xDD, b"\x00\x00")),
]


def test_the_walk_judges_scans_and_tables_as_tensorflow_does(tf):
    """Progressive scans' bands and bits, the Huffman tables each pass needs, the order of a
    scan's components, arithmetic conditioning and restart segments: no decode is left to
    settle them (arithmetic-coded and progressive JPEGs included)."""
    def decodes(data):
        try:
            tf.io.decode_jpeg(data)
        except tf.errors.OpError:
            return False
        return True

    for jpeg, reason in WALK_REJECTS:
        problem = jpeg_structure(jpeg).problem
        assert problem and reason in problem, (reason, problem)
        assert not decodes(jpeg), reason
    for jpeg in WALK_PASSES:
        structure = jpeg_structure(jpeg)
        assert structure.problem is None and not structure.needs_decode, structure
        assert decodes(jpeg), jpeg[-30:]


def _progressive_dc(width: int, height: int, diff_bits: str, dc_symbols: bytes) -> bytes:
    """A grey progressive JPEG of one DC scan: each block's difference coded as
    ``diff_bits``, with a DC table of one-bit and two-bit codes for ``dc_symbols``."""
    blocks = -(-width // 8) * -(-height // 8)
    bits = diff_bits * blocks
    bits += "1" * (-len(bits) % 8)
    data = int(bits, 2).to_bytes(len(bits) // 8, "big").replace(b"\xff", b"\xff\x00")
    counts = bytes([1, len(dc_symbols) - 1] + [0] * 14)
    return (b"\xff\xd8" + _segment(0xDB, b"\x00" + bytes([1] * 64))
            + _segment(0xC2, struct.pack(">BHHB", 8, height, width, 1) + b"\x01\x11\x00")
            + _segment(0xC4, b"\x00" + counts + dc_symbols)
            + _segment(0xDA, DC_FIRST) + data + b"\xff\xd9")


def test_progressive_dc_sums_that_may_pass_2_31_are_left_to_a_decode(tf):
    """libjpeg-turbo stops on a progressive DC scan whose differences sum past 2**31 (a
    sequential one wraps around silently): only decoding the scan tells, so the walk asks for
    it where the scan's blocks (between restarts) times the largest difference its table can
    code could get there, and not below."""
    def decodes(data):
        try:
            tf.io.decode_jpeg(data, ratio=8)
        except tf.errors.OpError:
            return False
        return True

    # 65,792 blocks of +32,767 each: past 2**31, and TensorFlow refuses it
    overflows = _progressive_dc(2048, 2056, "0" + "1" * 15, b"\x0f\x00")
    assert "sums up to 65,792 differences of up to 32,767" in jpeg_structure(
        overflows).decode_reason
    assert not decodes(overflows)
    # the same table and blocks, each difference 0: a decode is asked for, and it decodes
    zeros = _progressive_dc(2048, 2056, "10", b"\x0f\x00")
    assert jpeg_structure(zeros).needs_decode and decodes(zeros)
    # 65,280 blocks cannot get past 2**31: no decode asked for, and TensorFlow agrees
    below = _progressive_dc(2048, 2040, "0" + "1" * 15, b"\x0f\x00")
    assert not jpeg_structure(below).needs_decode and decodes(below)
    # a restart interval bounds the sum
    restarts = overflows.replace(b"\xff\xc4", _segment(0xDD, b"\x04\x00") + b"\xff\xc4", 1)
    assert jpeg_structure(restarts).problem is None
    assert not jpeg_structure(restarts).needs_decode
