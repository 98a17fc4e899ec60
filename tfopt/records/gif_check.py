"""GIFs judged as TensorFlow's decoder judges them, without it.

``tf.io.decode_image`` reads a GIF with giflib (5.2.1 in TensorFlow 2.21), then draws its first
frame; tfopt's pipelines decode with ``expand_animations=False``, so that frame is the image.
What it does, measured (``tests/records/test_gif_check.py`` keeps this module in step):

- The signature, logical screen and global colour table must be whole, or the GIF is refused.
- Records (extensions, frames) are read up to the trailer. A frame counts once its descriptor,
  local colour table, LZW code size (8 bits at most), sides (not zero) and image data are read
  whole: the data decodes to exactly width x height pixels, no end-of-information code before,
  and its sub-blocks run to the empty one. At the first record that fails (cut short, an
  unknown record type, a broken frame) reading stops and the frames read whole so far are kept:
  a missing trailer or a damaged later frame costs nothing. With none, the GIF is refused.
- The decoded size is the largest frame width and height among the frames kept, not the
  logical screen's. tfopt records the screen's size, so a GIF whose frames do not span exactly
  its screen is refused (as a decode would show).
- The first frame is drawn: it needs a colour table (its own or the global one), and each of
  its pixels on the canvas must be the transparent index or an index within that table.

Only the first frame's data is decoded here (and a later one's where it would enlarge the
canvas), in pure Python; past :data:`GIF_DECODE_PIXELS` pixels that would be slow, and the
caller decodes instead.
"""

from __future__ import annotations

import dataclasses
import struct

import numpy as np

# Frames whose image data tfopt's LZW decoder reads, at most (pixels in all): beyond, a real
# decode is cheaper than decoding in Python.
GIF_DECODE_PIXELS = 4_000_000

_INT_MAX = (1 << 31) - 1
_LZ_MAX_CODE = 4095  # giflib's largest 12-bit code
_NO_SUCH_CODE = 4098  # giflib's "no entry" marker
_INTERLACED_PASSES = ((0, 8), (4, 8), (2, 4), (1, 2))  # (first row, row step)


@dataclasses.dataclass(frozen=True)
class GifCheck:
    """What :func:`gif_check` found.

    Attributes:
        problem: Why TensorFlow's decoder refuses the GIF (or decodes it at another size than
            its header's), or None.
        decode_reason: Set when only a real decode can tell (frames beyond the pixels this
            check may LZW-decode): why.
        decoded_pixels: The pixels it LZW-decoded.
    """

    problem: str | None
    decode_reason: str | None = None
    decoded_pixels: int = 0


@dataclasses.dataclass
class _Frame:
    index: int
    left: int
    top: int
    width: int
    height: int
    interlaced: bool
    colours: int  # entries in its colour table (local, else global), 0 for none
    code_size: int
    data: bytes  # its image data, the sub-blocks joined
    transparent: int  # the transparent index, -1 for none


def gif_check(data: bytes, *, decode_pixels: int = GIF_DECODE_PIXELS) -> GifCheck:
    """Judge a GIF as TensorFlow's decoder would (see the module docstring).

    Args:
        data: The whole file.
        decode_pixels: The most pixels this function LZW-decodes before it asks for a real
            decode instead.
    """
    if len(data) < 13 or not data.startswith(b"GIF"):
        return GifCheck("cut short inside its header and logical screen (13 bytes)")
    screen_width, screen_height, flags = struct.unpack_from("<HHB", data, 6)
    position = 13
    global_colours = 2 << (flags & 7) if flags & 0x80 else 0
    position += 3 * global_colours
    if position > len(data):
        return GifCheck(f"cut short inside its global colour table ({global_colours} colours)")
    frames, stop = _read_records(data, position, global_colours)
    if not frames:
        return GifCheck(stop or "no image in it")

    first = frames[0]
    if not first.colours:  # refused whether or not the frame decodes
        return GifCheck("frame 0 has no colour table, and there is no global one")
    # frames after the first matter up to the last one that enlarges the canvas: whether its
    # data and that of the frames before it decode whole decides which frames count
    last_enlarging, most_width, most_height = 0, first.width, first.height
    for frame in frames[1:]:
        if frame.width > most_width or frame.height > most_height:
            last_enlarging = frame.index
        most_width, most_height = max(most_width, frame.width), max(most_height, frame.height)
    to_decode = []
    for frame in frames[:last_enlarging + 1]:
        to_decode.append(frame)
        if frame.width * frame.height > _most_pixels(frame):
            break  # cannot decode whole, and no frame after it counts
    pixels = sum(frame.width * frame.height for frame in to_decode
                 if frame.width * frame.height <= _most_pixels(frame))
    if pixels > decode_pixels:
        return GifCheck(None, f"a GIF of {pixels:,} pixels to check (past {decode_pixels:,}, a "
                        "decode is cheaper than tfopt's own LZW check)")
    kept, first_pixels = len(frames), b""
    for frame in to_decode:
        count = frame.width * frame.height
        if count > _most_pixels(frame):
            outcome = (f"its {len(frame.data):,} bytes of image data cannot hold its "
                       f"{frame.width}x{frame.height} px (cut short or corrupt)")
        else:
            outcome, decoded = _lzw_decode(frame.data, frame.code_size, count)
        if outcome:
            if frame.index == 0:
                return GifCheck(f"frame 0: {outcome}", decoded_pixels=pixels)
            kept = frame.index
            break
        if frame.index == 0:
            first_pixels = decoded
    width = max(frame.width for frame in frames[:kept])
    height = max(frame.height for frame in frames[:kept])
    if (width, height) != (screen_width, screen_height):
        return GifCheck(f"its frames span {width}x{height} px, its logical screen "
                        f"{screen_width}x{screen_height}: TensorFlow decodes it at "
                        f"{width}x{height}, not at the size its header gives",
                        decoded_pixels=pixels)
    bad = _first_bad_index(first, first_pixels, width, height)
    if bad is not None:
        return GifCheck(f"frame 0: colour index {bad} outside its {first.colours}-colour "
                        "table", decoded_pixels=pixels)
    return GifCheck(None, decoded_pixels=pixels)


def _read_records(data: bytes, position: int, global_colours: int):
    """The frames read whole up to the first record that fails, and why reading stopped (None
    at the trailer). Frames are whole here in their structure; their data is decoded later."""
    frames: list[_Frame] = []
    end = len(data)
    transparent = -1  # from the first graphic control extension since the last frame
    seen_control = False
    while True:
        if position >= end:
            return frames, "cut short: no trailer after the last record"
        introducer = data[position]
        position += 1
        if introducer == 0x3B:
            return frames, None
        if introducer == 0x21:  # extension: a label, then sub-blocks
            if position >= end:
                return frames, "cut short inside an extension"
            label = data[position]
            position += 1
            first_block = True
            while True:
                if position >= end:
                    return frames, "cut short inside an extension"
                size = data[position]
                position += 1
                if size == 0:
                    break
                if position + size > end:
                    return frames, "cut short inside an extension"
                if first_block and label == 0xF9 and not seen_control:
                    # giflib reads the first graphic control block whose first sub-block it
                    # finds; one of another length than 4 means no transparency
                    seen_control = True
                    if size == 4 and data[position] & 1:
                        transparent = data[position + 3]
                first_block = False
                position += size
            continue
        if introducer != 0x2C:
            return frames, (f"an unknown record type 0x{introducer:02x} at byte "
                            f"{position - 1}")
        index = len(frames)
        if position + 9 > end:
            return frames, f"cut short inside the descriptor of frame {index}"
        left, top, width, height, frame_flags = struct.unpack_from("<HHHHB", data, position)
        position += 9
        colours = global_colours
        if frame_flags & 0x80:
            colours = 2 << (frame_flags & 7)
            position += 3 * colours
            if position > end:
                return frames, f"cut short inside the colour table of frame {index}"
        if position >= end:
            return frames, f"cut short before the image data of frame {index}"
        code_size = data[position]
        position += 1
        if code_size > 8:
            return frames, f"frame {index}: LZW code size {code_size} (8 at most)"
        if width == 0 or height == 0:
            return frames, f"frame {index} is {width}x{height} px"
        if width > _INT_MAX // height:
            return frames, f"frame {index} is {width}x{height} px: too large to decode"
        chunks = []
        while True:
            if position >= end:
                return frames, f"cut short inside the image data of frame {index}"
            size = data[position]
            position += 1
            if size == 0:
                break
            if position + size > end:
                return frames, f"cut short inside the image data of frame {index}"
            chunks.append(data[position:position + size])
            position += size
        frames.append(_Frame(index, left, top, width, height, bool(frame_flags & 0x40),
                             colours, code_size, b"".join(chunks), transparent))
        transparent, seen_control = -1, False


def _most_pixels(frame: _Frame) -> int:
    """The most pixels a frame's image data could decode to: codes are code size + 1 bits
    wide at least, and giflib gives up on a code of more than 4,095 pixels."""
    return 8 * len(frame.data) // (frame.code_size + 1) * _LZ_MAX_CODE


def _lzw_decode(data: bytes, code_size: int, count: int):
    """``(problem, pixels)``: decode GIF LZW ``data`` to ``count`` pixels as giflib does.

    A plain LZW decoder (strings in a table) for well-formed streams; at the first code it
    cannot follow (an unknown code, a code straight after a clear code that is not a pixel)
    the stream is decoded again by :func:`_giflib_decode`, which copies giflib's own handling
    of damaged streams (mostly: decode garbage, sometimes: give up). The codes themselves are
    cut from the bit stream with NumPy, a run at a time: between two clear codes their widths
    depend on nothing but their number.
    """
    clear = 1 << code_size
    end_code = clear + 1
    widths = _code_widths(code_size)
    padded = np.frombuffer(data + b"\0\0\0", np.uint8).astype(np.uint32)
    total_bits = 8 * len(data)
    literals = [bytes([value & 0xFF]) for value in range(clear)] + [b"", b""]
    table = list(literals)
    output: list[bytes] = []
    produced = 0
    last = None
    bit = 0  # where the next code starts
    since_clear = 0  # codes read since the last clear code (or the start)
    while True:
        run = widths[min(since_clear, len(widths) - 1):][:_RUN]
        if len(run) < _RUN:  # past the widening: 12 bits from here on
            run = np.concatenate([run, np.full(_RUN - len(run), 12, np.int64)])
        ends = bit + np.cumsum(run)
        available = int(np.searchsorted(ends, total_bits, side="right"))
        starts = ends[:available] - run[:available]
        first_byte = starts >> 3
        window = (padded[first_byte] | padded[first_byte + 1] << 8
                  | padded[first_byte + 2] << 16)
        codes = (window >> (starts & 7).astype(np.uint32)) & ((1 << run[:available]) - 1)
        specials = np.flatnonzero(codes >= clear)  # clear, end and table codes: looked at below
        stop = available
        special_codes = codes[specials]
        marks = np.flatnonzero((special_codes == clear) | (special_codes == end_code))
        if len(marks):
            stop = int(specials[marks[0]])
        emitted = len(output)
        size = len(table)
        for code in codes[:stop].tolist():
            if code < size:  # a pixel, or an entry defined since the last clear code
                string = table[code]
            elif code == size and last is not None:
                string = last + last[:1]  # the entry being defined: the last string and its start
            else:
                produced += sum(map(len, output[emitted:]))
                if produced >= count:
                    return None, b"".join(output)[:count]
                return _giflib_decode(data, code_size, count)
            output.append(string)
            if last is not None and size < _LZ_MAX_CODE:
                table.append(last + string[:1])
                size += 1
            last = string
        produced += sum(map(len, output[emitted:]))
        if produced >= count:
            return None, b"".join(output)[:count]
        if stop < available:
            if codes[stop] == end_code:
                return _early_end(produced, count), None
            table = list(literals)  # a clear code: start over
            last = None
            bit = int(ends[stop])
            since_clear = 0
            continue
        if available < _RUN:
            return _short(produced, count), None
        bit = int(ends[-1])
        since_clear += _RUN


# Codes cut from the bit stream per NumPy call.
_RUN = 4096


def _code_widths(code_size: int):
    """The width in bits of each code after a clear code, as giflib widens them: it counts
    each code it reads, and widens the next once the count passes the current width's range,
    up to 12 bits."""
    widths = []
    running_code, bits = (1 << code_size) + 2, code_size + 1
    while bits < 12:
        widths.append(bits)
        running_code += 1
        if running_code > 1 << bits:
            bits += 1
    widths.append(12)
    return np.array(widths, np.int64)


def _short(produced: int, count: int) -> str:
    return (f"its image data ends after {produced:,} of its {count:,} pixels (cut short or "
            "corrupt)")


def _early_end(produced: int, count: int) -> str:
    return (f"an end-of-information code after {produced:,} of its {count:,} pixels "
            "(corrupt image data)")


def _giflib_decode(data: bytes, code_size: int, count: int):
    """:func:`_lzw_decode` as giflib's ``DGifDecompressLine`` does it, quirks included: codes
    it has no entry for decode to garbage, and it gives up ("image is defective") only where a
    trace through its prefix table runs away."""
    clear = 1 << code_size
    end_code = clear + 1
    prefix = [_NO_SUCH_CODE] * (_LZ_MAX_CODE + 1)
    suffix = [0] * (_LZ_MAX_CODE + 1)
    running_code, running_bits = end_code + 1, code_size + 1
    max_code = 1 << running_bits
    last_code = _NO_SUCH_CODE
    pixels = bytearray()
    position, buffer, buffered, length = 0, 0, 0, len(data)

    def first_pixel(code: int) -> int:  # giflib's DGifGetPrefixChar
        steps = 0
        while code > clear and steps <= _LZ_MAX_CODE:
            steps += 1
            if code > _LZ_MAX_CODE:
                return _NO_SUCH_CODE
            code = prefix[code]
        return code

    while len(pixels) < count:
        while buffered < running_bits:
            if position >= length:
                return _short(len(pixels), count), None
            buffer |= data[position] << buffered
            position += 1
            buffered += 8
        code = buffer & ((1 << running_bits) - 1)
        buffer >>= running_bits
        buffered -= running_bits
        if running_code < _LZ_MAX_CODE + 2:
            running_code += 1
            if running_code > max_code and running_bits < 12:
                max_code <<= 1
                running_bits += 1
        if code == end_code:
            return _early_end(len(pixels), count), None
        if code == clear:
            prefix = [_NO_SUCH_CODE] * (_LZ_MAX_CODE + 1)
            running_code, running_bits = end_code + 1, code_size + 1
            max_code = 1 << running_bits
            last_code = _NO_SUCH_CODE
            continue
        if code < clear:
            pixels.append(code)
        else:
            stack = []
            if prefix[code] == _NO_SUCH_CODE:
                current = last_code
                value = first_pixel(last_code if code == running_code - 2 else code) & 0xFF
                suffix[running_code - 2] = value
                stack.append(value)
            else:
                current = code
            while len(stack) < _LZ_MAX_CODE and clear < current <= _LZ_MAX_CODE:
                stack.append(suffix[current])
                current = prefix[current]
            if len(stack) >= _LZ_MAX_CODE or current > _LZ_MAX_CODE:
                return (f"its image data is defective after {len(pixels):,} of its {count:,} "
                        "pixels (corrupt LZW codes)"), None
            stack.append(current & 0xFF)
            pixels.extend(reversed(stack))
        if (last_code != _NO_SUCH_CODE and running_code - 2 < _LZ_MAX_CODE
                and prefix[running_code - 2] == _NO_SUCH_CODE):
            prefix[running_code - 2] = last_code
            source = last_code if code == running_code - 2 else code
            suffix[running_code - 2] = first_pixel(source) & 0xFF
        last_code = code
    return None, bytes(pixels[:count])


def _first_bad_index(frame: _Frame, pixels: bytes, width: int, height: int) -> int | None:
    """The first colour index of the first frame's drawn pixels (those on the canvas) that
    is neither transparent nor within its colour table, or None."""
    allowed = frame.colours
    if allowed >= 256:
        return None
    bad = {value for value in set(pixels) if value >= allowed and value != frame.transparent}
    if not bad:
        return None
    # the frame may reach past the canvas on the right or bottom: only what lies on it counts
    # an interlaced frame's rows come in four passes; giflib stores them in display order
    rows = ([row for first, step in _INTERLACED_PASSES for row in range(first, frame.height, step)]
            if frame.interlaced else range(frame.height))
    drawn_width = min(frame.width, width - frame.left)
    for sequence, row in sorted(enumerate(rows), key=lambda pair: pair[1]):
        if frame.top + row >= height:
            break
        line = pixels[sequence * frame.width:sequence * frame.width + drawn_width]
        for value in line:
            if value in bad:
                return value
    return None
