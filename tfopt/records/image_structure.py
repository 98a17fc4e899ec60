"""Whether TensorFlow's decoder reads an encoded image, judged without it where that is honest.

Each format has its own check, each held to TensorFlow's verdicts by a differential test:
JPEGs by a walk through their markers and image data (:func:`~tfopt.records.image_header.
jpeg_structure`), PNGs by their chunks and inflated data (:func:`~tfopt.records.image_header.
png_problem`), GIFs by their records and the LZW data of the frames that decide the decoded
image (:mod:`tfopt.records.gif_check`), BMPs by their header and size
(:mod:`tfopt.records.bmp_check`). What is left to a real decode: a progressive JPEG whose DC
sums could overflow, and GIFs whose frames would take longer to LZW-decode in Python than a
decode takes (counting TensorFlow's import, once per process).

Example:
    >>> structure_verdict(data, ImageFormat.GIF, decoder_loaded=False)
    StructureVerdict(problem=None, decode_reason=None)
"""

from __future__ import annotations

import dataclasses

from tfopt.records.bmp_check import bmp_problem
from tfopt.records.gif_check import GIF_DECODE_PIXELS, gif_check
from tfopt.records.image_header import ImageFormat, jpeg_structure, png_problem

# GIF pixels one process LZW-decodes in Python before a real decode is cheaper: decoding this
# many in Python costs about what importing TensorFlow does.
PROCESS_GIF_PIXELS = 20_000_000

_gif_pixels_decoded = 0  # in this process, so far


@dataclasses.dataclass(frozen=True)
class StructureVerdict:
    """Attributes:
    problem: Why the decoder refuses the image, or None.
    decode_reason: Set when only a real decode can tell: why (for messages and logs).
    """

    problem: str | None
    decode_reason: str | None = None


def structure_verdict(data: bytes, image_format: ImageFormat, *,
                      decoder_loaded: bool) -> StructureVerdict:
    """Judge an encoded image of a known format without decoding it, where that is honest.

    Args:
        data: The whole encoded image.
        image_format: Its format, as sniffed.
        decoder_loaded: Whether this process imported TensorFlow already: then a GIF's frames
            are left to a real decode, which is faster than Python's LZW decoding.
    """
    global _gif_pixels_decoded
    if image_format is ImageFormat.JPEG:
        structure = jpeg_structure(data)
        return StructureVerdict(structure.problem, structure.decode_reason)
    if image_format is ImageFormat.PNG:
        return StructureVerdict(png_problem(data))
    if image_format is ImageFormat.GIF:
        budget = 0 if decoder_loaded else min(GIF_DECODE_PIXELS,
                                               PROCESS_GIF_PIXELS - _gif_pixels_decoded)
        check = gif_check(data, decode_pixels=max(0, budget))
        _gif_pixels_decoded += check.decoded_pixels
        return StructureVerdict(check.problem, check.decode_reason)
    return StructureVerdict(bmp_problem(data))
