"""Image formats and sizes read from the first bytes of an encoded image, without decoding.

Pure Python: conversion planning and ``inspect`` use it on thousands of files, where a decode
would cost milliseconds each and a header read costs microseconds.
"""

from __future__ import annotations

import dataclasses
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

SIGNATURES = (
    (b"\xff\xd8\xff", ImageFormat.JPEG),
    (b"\x89PNG\r\n\x1a\n", ImageFormat.PNG),
    (b"GIF87a", ImageFormat.GIF),
    (b"GIF89a", ImageFormat.GIF),
    (b"BM", ImageFormat.BMP),
)

# JPEG start-of-frame markers (baseline, progressive, lossless, arithmetic...) carry the size.
# 0xC4 (DHT), 0xC8 (JPG) and 0xCC (DAC) share the range but are not frames.
_JPEG_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# The frames TensorFlow's decoder reads: it is built on libjpeg-turbo 2.1 (TensorFlow 2.21's
# bundled headers say 2.1.4), which stops with "Unsupported JPEG process: SOF type 0x.." on
# every other frame type and on the reserved 0xC8 (JPG) marker.
_DECODABLE_FRAMES = {0xC0: "baseline", 0xC1: "extended sequential", 0xC2: "progressive",
                     0xC9: "arithmetic-coded sequential", 0xCA: "arithmetic-coded progressive"}
_UNDECODABLE_FRAMES = {0xC3: "lossless", 0xC5: "hierarchical (differential sequential)",
                       0xC6: "hierarchical (differential progressive)",
                       0xC7: "hierarchical lossless", 0xCB: "lossless arithmetic-coded",
                       0xCD: "hierarchical arithmetic-coded sequential",
                       0xCE: "hierarchical arithmetic-coded progressive",
                       0xCF: "hierarchical lossless arithmetic-coded"}
_PROGRESSIVE_FRAMES = frozenset({0xC2, 0xC6, 0xCA, 0xCE})
_ARITHMETIC_FRAMES = frozenset({0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
_JPEG_EXTENSION_MARKER = 0xC8  # JPG, reserved for extensions: libjpeg stops on it
# libjpeg's JPEG_MAX_DIMENSION: "Maximum supported image dimension is 65500 pixels"
JPEG_MAX_SIDE = 65500
# libjpeg's D_MAX_BLOCKS_IN_MCU: the 8x8 blocks one MCU of an interleaved scan may hold
_JPEG_MAX_BLOCKS_IN_MCU = 10
# Markers that stand alone, without a length field.
_JPEG_STANDALONE = frozenset(range(0xD0, 0xD8)) | {0x01, 0xD8}


def sniff_format(data: bytes) -> ImageFormat | None:
    """The image format that ``data`` starts with, or None when it is not a known image."""
    for signature, image_format in SIGNATURES:
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
            frame = jpeg_frame(data)
            return frame.height, frame.width
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


@dataclasses.dataclass(frozen=True)
class JpegFrame:
    """The fields of a JPEG's frame header (its start-of-frame segment).

    Attributes:
        marker: The start-of-frame marker, 0xC0 (baseline) to 0xCF.
        precision: Bits per sample: 8 in nearly every JPEG, 12 or 16 in medical and raw ones.
        height: Rows.
        width: Columns.
        components: Colour components: 1 (grey), 3 (YCbCr, RGB) or 4 (CMYK, YCCK).
    """

    marker: int
    precision: int
    height: int
    width: int
    components: int


def jpeg_frame(data: bytes) -> JpegFrame:
    """The frame header of a JPEG, found by walking its markers up to it.

    Raises:
        ValueError: The header is cut short or malformed, or a marker TensorFlow's decoder
            stops on comes first.
    """
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
        if marker == _JPEG_EXTENSION_MARKER:
            raise ValueError(f"the reserved marker 0xffc8 (JPG) at byte {position + 1}: TensorFlow's "
                             "decoder stops on it")
        (length,) = struct.unpack(">H", data[position + 2 : position + 4])
        if marker in _JPEG_SOF_MARKERS:
            if position + 10 > end:
                break
            precision, height, width, components = struct.unpack(
                ">BHHB", data[position + 4 : position + 10])
            return JpegFrame(marker, precision, height, width, components)
        position += 2 + length
    raise ValueError("JPEG header ends before its frame size (truncated file?)")


def jpeg_frame_problem(marker: int, precision: int, height: int, width: int) -> str | None:
    """Why TensorFlow's decoder refuses a JPEG with this frame header, or None.

    Its frame type (lossless and hierarchical JPEGs are not read), its precision (8 bits only:
    the library is built for 8-bit samples) and its sides (65,500 px at most); the decoded size
    is judged apart (:mod:`tfopt.records.image_limits`).
    """
    if marker in _UNDECODABLE_FRAMES:
        return (f"{_UNDECODABLE_FRAMES[marker]} JPEG (SOF{marker - 0xC0}, marker 0xff{marker:02x}): "
                "TensorFlow's decoder reads baseline, extended, progressive and arithmetic-coded "
                "JPEGs only")
    if precision == 12:
        return "12-bit JPEG: TensorFlow decodes 8-bit JPEGs only"
    if precision != 8:
        return f"sample precision {precision} bits: TensorFlow decodes 8-bit JPEGs only"
    if max(height, width) > JPEG_MAX_SIDE:
        return (f"{width}x{height} px: TensorFlow's JPEG decoder reads sides of at most "
                f"{JPEG_MAX_SIDE:,} px")
    return None


# Segment markers that may follow a scan (progressive and multi-scan JPEGs): tables, restart
# interval, another scan, application data, comments, DNL.
_BETWEEN_SCANS = frozenset({0xC4, 0xCC, 0xDB, 0xDD, 0xDA, 0xDC, 0xFE} | set(range(0xE0, 0xF0)))


@dataclasses.dataclass(frozen=True)
class JpegStructure:
    """What a walk through a JPEG's markers found.

    Attributes:
        problem: What is wrong, or None when the structure is whole.
        progressive: A progressive (multi-scan) JPEG.
        arithmetic: An arithmetic-coded JPEG.
        decode_reason: Set when only a real decode can prove the image whole: why. One case:
            a progressive Huffman-coded JPEG with a DC scan long enough for its differences
            to sum past 2**31, which libjpeg-turbo stops on ("DCT coefficient out of range")
            and only decoding that scan's data can rule out.
    """

    problem: str | None
    progressive: bool = False
    arithmetic: bool = False
    decode_reason: str | None = None

    @property
    def needs_decode(self) -> bool:
        """Whether only a decode can prove the image whole (see ``decode_reason``)."""
        return self.problem is None and self.decode_reason is not None


def jpeg_structure(data: bytes) -> JpegStructure:
    """Check a JPEG's structure: every segment, and the image data up to the end marker.

    This finds what makes TensorFlow's decoder fail (a cut file, an unknown marker in the image
    data, broken segment lengths or tables, tables used but never defined, a frame type,
    precision or sampling it does not read, a scan that names its components out of the
    frame's order, a progressive scan's band or successive-approximation bits out of range:
    libjpeg's fatal errors are marker-level, damage inside Huffman- or arithmetic-coded data
    only draws warnings) without decoding, for a fraction of what a decode at 1/8 scale costs.
    The order of a progressive JPEG's scans is not judged: libjpeg warns about a scan
    that refines bits no earlier scan sent, and decodes on.
    Checked against the decoder: over thousands of random corruptions of sequential,
    progressive and arithmetic-coded JPEGs it rejected every file the decoder rejected;
    tests/records/test_image_header.py keeps it so.
    """
    state = _JpegWalk()
    problem = state.walk(data)
    return JpegStructure(problem, state.progressive, state.arithmetic, state.decode_reason)


# libjpeg's MAX_COMPS_IN_SCAN: a scan names at most 4 components, found among the first 4
_JPEG_MAX_SCAN_COMPONENTS = 4
_INT_MAX = (1 << 31) - 1


class _JpegWalk:
    def __init__(self):
        self.progressive = False
        self.arithmetic = False
        self.decode_reason = None
        self.width = self.height = 0
        # per frame component, in the frame's order
        self.component_ids: list[int] = []
        self.frame_tables: list[int] = []  # quantization table
        self.sampling: list[tuple[int, int]] = []  # (horizontal, vertical) factors
        self.quant_tables: set[int] = set()
        self.huffman_tables = {0: set(), 1: set()}  # class (0 DC, 1 AC) -> slots defined
        self.dc_largest_symbol: dict[int, int] = {}  # DC slot -> its largest difference size
        self.restart_interval = 0

    def walk(self, data: bytes) -> str | None:
        if not data.startswith(b"\xff\xd8"):
            return "no start-of-image marker"
        end = len(data)
        position = 2
        seen_frame = seen_scan = False
        while True:
            if position >= end:
                return "truncated: the file ends before its end-of-image marker"
            if data[position] != 0xFF:
                return f"marker expected at byte {position}, found 0x{data[position]:02x}"
            while position < end and data[position] == 0xFF:  # fill bytes
                position += 1
            if position >= end:
                return "truncated: the file ends inside a marker"
            marker = data[position]
            position += 1
            if marker == 0xD9:
                return None if seen_scan else "end-of-image marker before any image data"
            if marker in _JPEG_STANDALONE:
                continue
            if position + 2 > end:
                return "truncated: the file ends inside a segment header"
            length = (data[position] << 8) | data[position + 1]
            if length < 2:
                return f"bad segment length {length} at byte {position}"
            if position + length > end:
                return "truncated: the file ends inside a segment"
            segment = data[position + 2 : position + length]
            if marker == _JPEG_EXTENSION_MARKER:
                return (f"the reserved marker 0xffc8 (JPG) at byte {position - 1}: TensorFlow's "
                        "decoder stops on it")
            if marker in _JPEG_SOF_MARKERS:
                if seen_frame:
                    return "a second frame header"
                problem = self._frame(segment, marker)
                seen_frame = True
            elif marker == 0xDB:
                problem = self._quantization(segment)
            elif marker == 0xC4:
                problem = self._huffman(segment)
            elif marker == 0xCC:
                problem = _arithmetic_conditioning_problem(segment)
            elif marker == 0xDD:
                if len(segment) != 2:
                    return f"restart interval segment of {length} bytes, not 4"
                self.restart_interval = (segment[0] << 8) | segment[1]
                problem = None
            elif marker == 0xDA:
                if not seen_frame:
                    return "scan before any frame header"
                problem = self._scan(segment)
                if problem:
                    return problem
                seen_scan = True
                position = _skip_entropy_data(data, position + length)
                if position < 0:
                    return "truncated: the file ends inside the image data"
                following = data[position + 1]
                if following != 0xD9 and following not in _BETWEEN_SCANS:
                    return f"unknown marker 0xff{following:02x} in the image data at byte {position}"
                continue
            elif 0xC0 <= marker <= 0xFE:
                problem = None  # application data, comments, DNL...
            else:
                return f"unknown marker 0xff{marker:02x} at byte {position - 1}"
            if problem:
                return problem
            position += length

    def _frame(self, segment: bytes, marker: int) -> str | None:
        """Frame header fields that make libjpeg stop (type, precision, size, components,
        sampling)."""
        if len(segment) < 6:
            return "frame header cut short"
        precision, height, width, count = (segment[0], *struct.unpack(">HH", segment[1:5]),
                                           segment[5])
        problem = jpeg_frame_problem(marker, precision, height, width)
        if problem:
            return problem
        if height == 0 or width == 0:
            return f"frame size {height}x{width}"
        if not 1 <= count <= 4 or len(segment) != 6 + 3 * count:
            return f"frame header with {count} components does not fit its length"
        for index in range(count):
            component, factors, table = segment[6 + 3 * index : 9 + 3 * index]
            if not (1 <= factors >> 4 <= 4 and 1 <= factors & 15 <= 4) or table > 3:
                return "bad sampling factors or quantization table in the frame header"
            self.component_ids.append(component)
            self.frame_tables.append(table)
            self.sampling.append((factors >> 4, factors & 15))
        # libjpeg upsamples each component by a whole factor only: "Fractional sampling not
        # implemented yet" (a 3x2 luma beside a 2x1 chroma, say)
        most_h = max(h for h, _ in self.sampling)
        most_v = max(v for _, v in self.sampling)
        if any(most_h % h or most_v % v for h, v in self.sampling):
            factors = ", ".join(f"{h}x{v}" for h, v in self.sampling)
            return (f"sampling factors {factors}: TensorFlow's decoder upsamples by whole "
                    "factors only")
        self.width, self.height = width, height
        self.progressive = marker in _PROGRESSIVE_FRAMES
        self.arithmetic = marker in _ARITHMETIC_FRAMES
        return None

    def _quantization(self, segment: bytes) -> str | None:
        position = 0
        while position < len(segment):
            precision, table = segment[position] >> 4, segment[position] & 15
            if precision > 1 or table > 3:
                return "bad quantization table header"
            self.quant_tables.add(table)
            position += 1 + 64 * (precision + 1)
        return None if position == len(segment) else "quantization tables do not fit their segment"

    def _huffman(self, segment: bytes) -> str | None:
        position = 0
        while position < len(segment):
            table_class, table = segment[position] >> 4, segment[position] & 15
            counts = segment[position + 1 : position + 17]
            if table_class > 1 or table > 3 or len(counts) < 16:
                return "bad Huffman table header"
            total = sum(counts)
            values = segment[position + 17 : position + 17 + total]
            if total > 256 or len(values) < total:
                return "Huffman table does not fit its segment"
            if table_class == 0 and any(value > 15 for value in values):
                return "bad Huffman table: DC symbol above 15"
            # canonical codes must fit their lengths without the all-ones code, which JPEG
            # reserves: the check libjpeg's jpeg_make_d_derived_tbl makes
            last_length = max((i + 1 for i, count in enumerate(counts) if count), default=0)
            code = 0
            for length in range(1, last_length + 1):
                code += counts[length - 1]
                if code >= 1 << length:
                    return "bad Huffman table: more codes than their lengths allow"
                code <<= 1
            self.huffman_tables[table_class].add(table)
            if table_class == 0:
                self.dc_largest_symbol[table] = max(values, default=0)
            position += 17 + total
        return None

    def _scan(self, segment: bytes) -> str | None:
        if not segment:
            return "scan header cut short"
        count = segment[0]
        if not 1 <= count <= 4 or len(segment) != 4 + 2 * count:
            return f"scan header with {count} components does not fit its length"
        start, stop, refine, shift = segment[-3], segment[-2], segment[-1] >> 4, segment[-1] & 15
        members = self._scan_components(segment, count)
        if isinstance(members, str):
            return members
        blocks = 0
        for index, _ in members:
            table = self.frame_tables[index]
            if table not in self.quant_tables:
                return f"quantization table {table} is used, never defined"
            blocks += self.sampling[index][0] * self.sampling[index][1]
            if count > 1 and blocks > _JPEG_MAX_BLOCKS_IN_MCU:
                return (f"an interleaved scan of more than {_JPEG_MAX_BLOCKS_IN_MCU} blocks per "
                        "MCU (sampling factors too large): TensorFlow's decoder refuses it")
        if self.progressive:
            problem = _progression_problem(start, stop, refine, shift, count)
            if problem:
                return problem
        if self.arithmetic:
            return None  # no Huffman tables; the conditioning tables have defaults
        for _, tables in members:
            if not self.progressive:
                # libjpeg-turbo loads the standard tables into slots 0 and 1 of a sequential
                # JPEG that defines none (Motion-JPEG frames omit them)
                needed = ((0, tables >> 4), (1, tables & 15))
                defaults = {0, 1}
            elif start == 0:  # a progressive DC scan: its first pass needs the DC table
                needed = ((0, tables >> 4),) if refine == 0 else ()
                defaults = set()
            else:
                needed = ((1, tables & 15),)
                defaults = set()
            for table_class, table in needed:
                if table not in self.huffman_tables[table_class] | defaults:
                    kind = "DC" if table_class == 0 else "AC"
                    return f"{kind} Huffman table {table} is used, never defined"
        if self.progressive and start == 0 and refine == 0:
            self._check_dc_sums(members, count)
        return None

    def _scan_components(self, segment: bytes, count: int):
        """``[(frame component index, table selectors)]`` for a scan header, found as libjpeg's
        ``get_sos`` finds them, or what makes it stop: each scan component must match a frame
        component at or after its own place in the scan, among the first four, and appear
        once."""
        found: list[int | None] = [None] * _JPEG_MAX_SCAN_COMPONENTS
        members = []
        candidates = min(len(self.component_ids), _JPEG_MAX_SCAN_COMPONENTS)
        for place in range(count):
            component, tables = segment[1 + 2 * place], segment[2 + 2 * place]
            # libjpeg looks the component up among frame components whose place in the scan
            # is still free: one named out of the frame's order is not found
            index = next((candidate for candidate in range(candidates)
                          if self.component_ids[candidate] == component
                          and found[candidate] is None), None)
            if index is None or index in found[:place]:
                how = ("twice" if component in [self.component_ids[i] for i in found[:place]]
                       else "out of the frame's order" if component in self.component_ids
                       else "which the frame does not have")
                return f"scan names component {component} {how}: TensorFlow's decoder stops"
            found[place] = index
            members.append((index, tables))
        return members

    def _check_dc_sums(self, members, count: int) -> None:
        """Ask for a decode where a progressive DC scan may sum its differences past 2**31:
        each difference is below 2**s for the DC table's largest symbol s, and the sum starts
        over at each restart marker."""
        most_h = max(h for h, _ in self.sampling)
        most_v = max(v for _, v in self.sampling)
        for index, tables in members:
            largest = self.dc_largest_symbol.get(tables >> 4, 0)
            h, v = self.sampling[index]
            if count == 1:  # one block per MCU, over the component's own size
                columns = -(-self.width * h // most_h)
                rows = -(-self.height * v // most_v)
                units, per_unit = -(-columns // 8) * -(-rows // 8), 1
            else:
                units = -(-self.width // (8 * most_h)) * -(-self.height // (8 * most_v))
                per_unit = h * v
            run = min(units, self.restart_interval or units) * per_unit
            if run * ((1 << largest) - 1) > _INT_MAX:
                self.decode_reason = (
                    f"a progressive JPEG whose DC scan sums up to {run:,} differences of up to "
                    f"{(1 << largest) - 1:,} (libjpeg-turbo stops where they pass 2**31; only a "
                    "decode tells)")


def _progression_problem(start: int, stop: int, refine: int, shift: int,
                         count: int) -> str | None:
    """Why libjpeg stops on a progressive scan's parameters ("Invalid progressive parameters"),
    or None: a DC scan covers coefficient 0 alone, an AC scan a band within 1-63 of one
    component, a refinement scan refines by one bit, and no scan shifts by more than 13."""
    if start == 0:
        bad = stop != 0
    else:
        bad = start > stop or stop > 63 or count != 1
    if (refine and shift != refine - 1) or shift > 13:
        bad = True
    if bad:
        return (f"progressive scan parameters Ss={start} Se={stop} Ah={refine} Al={shift}: "
                "TensorFlow's decoder stops on them")
    return None


def _arithmetic_conditioning_problem(segment: bytes) -> str | None:
    """What makes libjpeg stop on a DAC segment (arithmetic conditioning tables), or None:
    pairs of (table, value), tables 0-15 (DC) and 16-31 (AC), a DC value's lower bound not
    above its upper one."""
    if len(segment) % 2:
        return "arithmetic conditioning segment of an odd length"
    for index, value in zip(segment[::2], segment[1::2], strict=True):
        if index >= 32:
            return f"arithmetic conditioning table {index} (0-31 exist)"
        if index < 16 and value & 15 > value >> 4:
            return f"arithmetic conditioning value 0x{value:02x} for DC table {index}: L > U"
    return None


def _skip_entropy_data(data: bytes, position: int) -> int:
    """Index of the first real marker after entropy-coded data, or -1 at the end of data.

    Inside the data 0xFF is always followed by 0x00 (byte stuffing), a restart marker
    (0xD0-0xD7) or more 0xFF fill; anything else is a marker that ends the data.
    """
    find = data.find
    while True:
        position = find(b"\xff", position)
        if position < 0 or position + 1 >= len(data):
            return -1
        following = data[position + 1]
        if following == 0x00 or 0xD0 <= following <= 0xD7:
            position += 2
        elif following == 0xFF:
            position += 1
        else:
            return position


# PNG colour types: channels, and the bit depths allowed with each (PNG spec, table 11.1)
_PNG_COLOUR_TYPES = {0: (1, {1, 2, 4, 8, 16}), 2: (3, {8, 16}), 3: (1, {1, 2, 4, 8}),
                     4: (2, {8, 16}), 6: (4, {8, 16})}
# Adam7 passes: (first column, first row, column step, row step)
_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
          (0, 1, 1, 2))
_PNG_MAX_PIXELS = 1 << 31  # beyond this a decoder refuses the image (and it would not fit)


def png_problem(data: bytes) -> str | None:
    """What makes a PNG undecodable, found without decoding it; None when it is whole.

    Every chunk is walked and its CRC checked; the IHDR must be valid (sizes, bit depth for the
    colour type, methods), a palette image must have its PLTE before the image data, the IDAT
    chunks must be consecutive and inflate (zlib, its Adler-32 checked) to exactly the bytes
    the IHDR implies, and every row must start with a known filter type (0-4); IEND must end
    the file. That is what a decoder checks before it can fail; the pixels themselves cannot be
    wrong in a way it would notice.
    """
    import zlib

    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "not a PNG signature"
    position, end = 8, len(data)
    header = None
    seen_plte = seen_iend = False
    idat_state = 0  # 0: none yet, 1: in the IDAT run, 2: after it
    inflate = zlib.decompressobj()
    pixels = bytearray()
    expected = 0
    while position < end:
        if end - position < 12:
            return f"cut short inside a chunk header at byte {position}"
        length, kind = struct.unpack_from(">I4s", data, position)
        body_start = position + 8
        body_end = body_start + length
        if length > (1 << 31) - 1 or body_end + 4 > end:
            return (f"cut short: chunk {kind!r} at byte {position} says {length:,} bytes, "
                    f"{max(0, end - body_start - 4):,} are left")
        (crc,) = struct.unpack_from(">I", data, body_end)
        if zlib.crc32(data[position + 4:body_end]) != crc:
            return f"chunk {kind!r} at byte {position}: CRC mismatch"
        body = data[body_start:body_end]
        position = body_end + 4
        if header is None:
            if kind != b"IHDR":
                return f"the first chunk is {kind!r}, not IHDR"
            header = _png_header(body)
            if isinstance(header, str):
                return header
            expected = _png_data_bytes(*header)
            continue
        if kind == b"IHDR":
            return "a second IHDR chunk"
        if kind == b"PLTE":
            seen_plte = True
        elif kind == b"IDAT":
            if idat_state == 2:
                return "IDAT chunks are not consecutive"
            idat_state = 1
            try:
                pixels += inflate.decompress(body, expected + 1 - len(pixels))
            except zlib.error as error:
                return f"the image data does not inflate ({error})"
            if len(pixels) > expected:
                return f"more image data than the IHDR implies ({expected:,} bytes)"
        else:
            if idat_state == 1:
                idat_state = 2
            if kind == b"IEND":
                seen_iend = True
                break
    if header is None:
        return "no IHDR chunk"
    if header[3] == 3 and not seen_plte:
        return "a palette image without a PLTE chunk"
    if idat_state == 0:
        return "no image data (IDAT)"
    if not inflate.eof:
        return (f"the image data is cut short ({len(pixels):,} of {expected:,} bytes inflate, "
                "the zlib stream does not end)")
    if len(pixels) != expected:
        return f"the image data inflates to {len(pixels):,} bytes, the IHDR implies {expected:,}"
    if not seen_iend:
        return "no IEND chunk: the file is cut short"
    bad = _png_bad_filter(pixels, *header)
    if bad is not None:
        return f"row {bad[0]} of pass {bad[1]}: unknown filter type {bad[2]}"
    return None


def _png_header(body: bytes):
    """``(width, height, bit depth, colour type, interlace)``, or what is wrong with it."""
    if len(body) != 13:
        return f"IHDR of {len(body)} bytes, not 13"
    width, height, depth, colour, compression, filtering, interlace = struct.unpack(
        ">IIBBBBB", body)
    if not 0 < width < 1 << 31 or not 0 < height < 1 << 31:
        return f"invalid size {width}x{height} in the IHDR"
    if width * height > _PNG_MAX_PIXELS:
        return f"{width}x{height} px: too large to decode"
    if colour not in _PNG_COLOUR_TYPES or depth not in _PNG_COLOUR_TYPES[colour][1]:
        return f"bit depth {depth} with colour type {colour}: not a valid PNG combination"
    if compression != 0 or filtering != 0 or interlace not in (0, 1):
        return (f"unknown method in the IHDR (compression {compression}, filter {filtering}, "
                f"interlace {interlace})")
    return width, height, depth, colour, interlace


def _png_passes(width: int, height: int, interlace: int):
    """``(pass width, pass height)`` of each (non-empty) pass: one for a non-interlaced PNG."""
    if not interlace:
        return [(width, height)]
    passes = []
    for column, row, column_step, row_step in _ADAM7:
        pass_width = (width - column + column_step - 1) // column_step
        pass_height = (height - row + row_step - 1) // row_step
        if pass_width > 0 and pass_height > 0:
            passes.append((pass_width, pass_height))
    return passes


def _png_row_bytes(width: int, depth: int, colour: int) -> int:
    """Bytes of one filtered row: the filter byte and the packed samples."""
    return 1 + (width * _PNG_COLOUR_TYPES[colour][0] * depth + 7) // 8


def _png_data_bytes(width, height, depth, colour, interlace) -> int:
    return sum(_png_row_bytes(pass_width, depth, colour) * pass_height
               for pass_width, pass_height in _png_passes(width, height, interlace))


def _png_bad_filter(pixels: bytearray, width, height, depth, colour, interlace):
    """``(row, pass, filter type)`` of the first row with an unknown filter type, or None."""
    offset = 0
    for number, (pass_width, pass_height) in enumerate(_png_passes(width, height, interlace)):
        row_bytes = _png_row_bytes(pass_width, depth, colour)
        span = row_bytes * pass_height
        filters = pixels[offset:offset + span:row_bytes]
        if max(filters) > 4:
            row = next(index for index, value in enumerate(filters) if value > 4)
            return row, number, filters[row]
        offset += span
    return None
