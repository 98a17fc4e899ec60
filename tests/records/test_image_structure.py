"""One verdict per format without decoding (records/image_structure.py), and when a decode is
cheaper than tfopt's own LZW check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import GIF_1X1
from hostile_images_helpers import handmade_jpeg, png_header
from image_formats_helpers import bmp, fixture_jpeg

from tfopt.records.image_header import ImageFormat
from tfopt.records.image_structure import StructureVerdict, structure_verdict


def test_each_format_gets_its_own_check():
    def verdict(data, image_format):
        return structure_verdict(data, image_format, decoder_loaded=False)

    assert verdict(fixture_jpeg("arithmetic_progressive.jpg"), ImageFormat.JPEG) == \
        StructureVerdict(None)
    assert "truncated" in verdict(handmade_jpeg(16, 16)[:-2], ImageFormat.JPEG).problem
    assert "no image data (IDAT)" in verdict(png_header(4, 4), ImageFormat.PNG).problem
    assert verdict(GIF_1X1, ImageFormat.GIF) == StructureVerdict(None)
    assert "cut short inside the image data of frame 0" in verdict(
        GIF_1X1[:-3], ImageFormat.GIF).problem
    assert verdict(bmp(3, 2), ImageFormat.BMP) == StructureVerdict(None)
    assert "4 bits per pixel" in verdict(bmp(3, 2, 4, palette=16), ImageFormat.BMP).problem


def test_with_tensorflow_loaded_gif_frames_are_left_to_it():
    """A real decode is then the cheaper check; what the records alone show is still said."""
    loaded = structure_verdict(GIF_1X1, ImageFormat.GIF, decoder_loaded=True)
    assert loaded.problem is None and "past 0, a decode is cheaper" in loaded.decode_reason
    assert "frame 0 has no colour table" in structure_verdict(
        b"GIF89a\x01\x00\x01\x00\x00\x00\x00" + GIF_1X1[19:], ImageFormat.GIF,
        decoder_loaded=True).problem


SCRIPT = """
import sys
sys.path[:0] = [{tests!r}, {records!r}]
from image_formats_helpers import one_colour_gif
from tfopt.records.image_header import ImageFormat
from tfopt.records.image_structure import PROCESS_GIF_PIXELS, structure_verdict
data = one_colour_gif(2000, 2000)
verdicts = [structure_verdict(data, ImageFormat.GIF, decoder_loaded=False) for _ in range(6)]
print(PROCESS_GIF_PIXELS)
print(*[v.decode_reason is None for v in verdicts])
print(verdicts[-1].decode_reason)
"""


def test_a_process_lzw_decodes_gifs_up_to_its_budget_then_asks_for_decodes():
    """Five 4-megapixel GIFs are decoded in Python (20 million pixels, a few seconds at most),
    the sixth is left to a decode: TensorFlow's import is then the cheaper way."""
    records = Path(__file__).parent
    script = SCRIPT.format(tests=str(records.parent), records=str(records))
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    budget, decoded, reason = run.stdout.splitlines()
    assert budget == "20000000"
    assert decoded == "True True True True True False"
    assert "a GIF of 4,000,000 pixels to check (past 0" in reason
