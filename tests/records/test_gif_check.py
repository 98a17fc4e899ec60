"""GIFs judged without decoding (records/gif_check.py), held to TensorFlow's verdicts."""

from __future__ import annotations

import numpy as np
from image_formats_helpers import (
    checkered,
    gif,
    gif_frame,
    one_colour_gif,
    pack_codes,
    tensorflow_decodes,
)

from tfopt.records.gif_check import GIF_DECODE_PIXELS, gif_check

WHOLE = gif_frame(checkered(6, 4), 6, 4)
# clear code, pixel 1, end of information: 1 pixel where 24 are due
ENDS_EARLY = gif_frame(None, 6, 4, image_data=pack_codes([(4, 3), (1, 3), (5, 3)]))
RUNS_OUT = gif_frame(None, 6, 4, image_data=pack_codes([(4, 3), (1, 3)]))  # no end code either
FOUR_COLOURS = (0, 0, 0), (9, 9, 9), (99, 99, 99), (255, 255, 255)

# name -> (GIF, what tfopt says, None where it decodes): TensorFlow agrees on each (below)
CASES = {
    "whole": (gif(6, 4, [WHOLE]), None),
    "animated": (gif(6, 4, [WHOLE, gif_frame(checkered(6, 4), 6, 4, transparent=1),
                            gif_frame(checkered(3, 2), 3, 2, left=1, top=1)]), None),
    "interlaced": (gif(6, 9, [gif_frame(checkered(6, 9), 6, 9, interlaced=True)]), None),
    "local colour table": (gif(6, 4, [gif_frame(checkered(6, 4, 4), 6, 4, colours=FOUR_COLOURS)],
                               colours=None), None),
    "no trailer": (gif(6, 4, [WHOLE], trailer=False), None),
    "a frame off the canvas edge": (gif(6, 4, [gif_frame(checkered(6, 4), 6, 4, left=2)]), None),
    "cut inside frame 0": (gif(6, 4, [WHOLE])[:-6], "cut short inside the image data of frame 0"),
    "frame 0 without its last sub-block": (gif(6, 4, [WHOLE], trailer=False)[:-1],
                                           "cut short inside the image data of frame 0"),
    "cut inside frame 1": (gif(6, 4, [WHOLE, WHOLE])[:-5], None),
    "cut inside the descriptor of frame 1": (gif(6, 4, [WHOLE])[:-1] + b",\0\0", None),
    "end code early in frame 0": (gif(6, 4, [ENDS_EARLY]),
                                  "frame 0: an end-of-information code after 1 of its 24 pixels"),
    "end code early in frame 1": (gif(6, 4, [WHOLE, ENDS_EARLY]), None),
    "data runs out in frame 0": (gif(6, 4, [RUNS_OUT]),
                                 "frame 0: its image data ends after 1 of its 24 pixels"),
    "data runs out in frame 1": (gif(6, 4, [WHOLE, RUNS_OUT]), None),
    "frames smaller than the screen": (gif(6, 4, [gif_frame(checkered(3, 2), 3, 2)]),
                                       "its frames span 3x2 px, its logical screen 6x4"),
    "a frame larger than the screen": (gif(6, 4, [gif_frame(checkered(8, 4), 8, 4)]),
                                       "its frames span 8x4 px"),
    "a larger frame, cut short": (gif(6, 4, [WHOLE, gif_frame(checkered(8, 5), 8, 5)])[:-5], None),
    "index beyond the colour table": (gif(6, 4, [gif_frame(checkered(6, 4, 4), 6, 4)]),
                                      "frame 0: colour index 2 outside its 2-colour table"),
    "index beyond the table in frame 1": (gif(6, 4, [WHOLE, gif_frame(checkered(6, 4, 4), 6, 4)]),
                                          None),
    "index beyond the table, transparent": (
        gif(6, 4, [gif_frame([3 if i % 2 else 0 for i in range(24)], 6, 4, transparent=3)]), None),
    "index beyond the table, off the canvas": (  # frame columns 4-5 land past column 6
        gif(6, 4, [gif_frame([3 if x >= 4 else 1 for y in range(4) for x in range(6)], 6, 4,
                             left=2)]), None),
    "no colour table": (gif(6, 4, [WHOLE], colours=None), "frame 0 has no colour table"),
    "LZW code size 9": (gif(6, 4, [WHOLE])[:29] + b"\x09" + gif(6, 4, [WHOLE])[30:],
                        "frame 0: LZW code size 9 (8 at most)"),
    "LZW code size 9 in frame 1": (gif(6, 4, [WHOLE, WHOLE[:10] + b"\x09" + WHOLE[11:]]), None),
    "no image": (gif(6, 4, []), "no image in it"),
    "an unknown record after frame 0": (gif(6, 4, [WHOLE], trailer=False) + b"X", None),
    "an unknown record first": (gif(6, 4, [b"X" + WHOLE]), "an unknown record type 0x58"),
    "frame 1 of width 0": (gif(6, 4, [WHOLE, gif_frame([], 0, 4)]), None),
    "frame 0 of height 0": (gif(6, 4, [gif_frame([], 6, 0)]), "frame 0 is 6x0 px"),
    "cut in the global colour table": (gif(6, 4, [WHOLE])[:16],
                                       "cut short inside its global colour table"),
    "data that cannot hold its pixels": (
        gif(6, 4, [gif_frame(None, 6000, 6000, image_data=b"\x04\x01")]),
        "frame 0: its 2 bytes of image data cannot hold its 6000x6000 px"),
    "a frame of 2**31 pixels or more": (
        gif(6, 4, [gif_frame(None, 60000, 60000, image_data=b"\x04\x01")]),
        "frame 0 is 60000x60000 px: too large to decode"),
}
# the last of 8 rows holds an index beyond the table: drawn at the top, past the canvas's
# bottom one row lower (in the stored order of an interlaced frame too)
LAST_ROW_BAD = [1] * 6 * 7 + [3] * 6
for _interlaced in (False, True):
    _how = "interlaced" if _interlaced else "in order"
    CASES[f"a bad last row, drawn ({_how})"] = (
        gif(6, 8, [gif_frame(LAST_ROW_BAD, 6, 8, interlaced=_interlaced)]),
        "frame 0: colour index 3 outside its 2-colour table")
    CASES[f"a bad last row, past the canvas ({_how})"] = (
        gif(6, 8, [gif_frame(LAST_ROW_BAD, 6, 8, top=1, interlaced=_interlaced)]), None)


def test_gifs_are_judged_as_tensorflow_judges_them(tf):
    for name, (data, problem) in CASES.items():
        check = gif_check(data)
        assert check.decode_reason is None, name
        assert (check.problem is None) == tensorflow_decodes(tf, data), (name, check.problem)
        if problem is None:
            assert check.problem is None, name
        else:
            assert problem in check.problem, (name, check.problem)


def _random_gif(rng, index: int) -> bytes:
    width, height = int(rng.integers(1, 40)), int(rng.integers(1, 30))
    count = int(rng.choice([2, 3, 4, 16, 200, 256]))
    colours = [tuple(int(c) for c in rng.integers(0, 256, 3)) for _ in range(count)]
    code_size = max(2, (count - 1).bit_length())
    pixels = [int(v) for v in rng.integers(0, count, width * height)]
    if index % 4 == 1:  # runs: long LZW strings
        pixels = [i // 7 % count for i in range(width * height)]
    frames = [gif_frame(pixels, width, height, code_size=code_size, interlaced=index % 3 == 0,
                        transparent=int(rng.integers(0, count)) if index % 5 == 0 else None)]
    for _ in range(int(rng.integers(0, 3))):
        w, h = int(rng.integers(1, width + 1)), int(rng.integers(1, height + 1))
        frames.append(gif_frame([int(v) for v in rng.integers(0, count, w * h)], w, h,
                                left=int(rng.integers(0, width - w + 1)),
                                top=int(rng.integers(0, height - h + 1)), code_size=code_size))
    return gif(width, height, frames, colours=colours)


def test_random_damage_gets_tensorflows_verdict(tf):
    """Differential test: random GIFs, damaged at random (cut, bytes changed, bits flipped,
    bytes dropped), judged by TensorFlow and by tfopt: the verdicts are the same, damage deep
    in the LZW data (which giflib decodes to garbage, or gives up on) included."""
    rng = np.random.default_rng(16)
    refused = 0
    for trial in range(600):
        damaged = bytearray(_random_gif(rng, trial))
        assert gif_check(bytes(damaged)).problem is None
        size, kind = len(damaged), trial % 5
        where = int(rng.integers(6, size))
        if kind == 0:
            damaged = damaged[:int(rng.integers(13, size))]
        elif kind == 1:
            damaged[where] = int(rng.integers(0, 256))
        elif kind == 2:
            run = int(rng.integers(1, 12))
            damaged[where:where + run] = rng.integers(0, 256, run, dtype=np.uint8).tobytes()
        elif kind == 3:
            for _ in range(3):
                damaged[int(rng.integers(6, size))] ^= 1 << int(rng.integers(0, 8))
        else:
            del damaged[where:where + int(rng.integers(1, 5))]
        check = gif_check(bytes(damaged))
        decodes = tensorflow_decodes(tf, bytes(damaged))
        refused += not decodes
        assert check.decode_reason is None
        assert (check.problem is None) == decodes, (trial, check.problem, bytes(damaged).hex())
    assert refused > 200  # the damage was real enough to matter


def test_large_gifs_decode_whole_through_full_lzw_tables(tf):
    """Tables filled and cleared many times, 12-bit codes: 9 million pixels of one colour."""
    data = one_colour_gif(3000, 3000)
    check = gif_check(data, decode_pixels=10_000_000)
    assert check.problem is None and check.decoded_pixels == 9_000_000
    assert tensorflow_decodes(tf, data)
    assert "cut short" in gif_check(data[:-40], decode_pixels=10_000_000).problem


def test_frames_past_the_budget_are_left_to_a_decode():
    data = one_colour_gif(2100, 2000)  # 4.2 million pixels
    assert 2100 * 2000 > GIF_DECODE_PIXELS
    check = gif_check(data)
    assert check.problem is None and check.decoded_pixels == 0
    assert "a GIF of 4,200,000 pixels to check (past 4,000,000" in check.decode_reason
    within = gif_check(data, decode_pixels=5_000_000)
    assert within.problem is None and within.decode_reason is None
    assert within.decoded_pixels == 4_200_000


def test_only_frames_that_could_change_the_canvas_are_decoded():
    """Frames within the first one's size never change what TensorFlow decodes: their data
    is not decoded (a damaged one costs nothing). One that enlarges the canvas is, with every
    frame before it."""
    damaged = gif_frame(None, 6, 4, image_data=b"\x04\x01")
    check = gif_check(gif(6, 4, [WHOLE, damaged, gif_frame(checkered(3, 2), 3, 2)]))
    assert check.problem is None and check.decoded_pixels == 24
    # the large frame counts only if the damaged one before it decodes: it does not
    check = gif_check(gif(8, 5, [gif_frame(checkered(6, 4), 6, 4), damaged,
                                 gif_frame(checkered(8, 5), 8, 5)]))
    assert "its frames span 6x4 px, its logical screen 8x5" in check.problem
    check = gif_check(gif(8, 5, [gif_frame(checkered(6, 4), 6, 4), WHOLE,
                                 gif_frame(checkered(8, 5), 8, 5)]))
    assert check.problem is None and check.decoded_pixels == 24 + 24 + 40
