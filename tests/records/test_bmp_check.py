"""BMPs judged without decoding (records/bmp_check.py), held to TensorFlow's verdicts."""

from __future__ import annotations

from image_formats_helpers import bmp, tensorflow_decodes

from tfopt.records.bmp_check import bmp_problem

# name -> (BMP, what tfopt says, None where it decodes): TensorFlow agrees on each (below)
CASES = {
    "24-bit, bottom-up": (bmp(5, 3, 24), None),
    "24-bit, top-down": (bmp(5, -3, 24), None),
    "32-bit": (bmp(5, 3, 32), None),
    "32-bit bit fields": (bmp(5, 3, 32, compression=3), None),
    "8-bit with a palette": (bmp(5, 3, 8, palette=256), None),  # read as grey levels
    "a version 5 header": (bmp(5, 3, 24, header=124), None),
    "1-bit palette": (bmp(5, 3, 1, palette=2), "1 bits per pixel: TensorFlow's BMP decoder "
                      "reads 8-, 24- and 32-bit pixels only"),
    "4-bit palette": (bmp(5, 3, 4, palette=16), "4 bits per pixel"),
    "16-bit": (bmp(5, 3, 16), "16 bits per pixel"),
    "40-bit": (bmp(5, 3, 40), "40 bits per pixel"),
    "cut short": (bmp(5, 3, 24)[:-1], "101 bytes where its header implies 102 (pixel data at "
                  "byte 54, 3 rows of 16 bytes): cut short"),
    "a byte after the rows": (bmp(5, 3, 24, after=b"\0"), "1 bytes after its pixel rows"),
    "RLE-compressed": (bmp(5, 3, 8, compression=1, palette=256,
                           pixels=b"\x05\x01\x00\x00" * 3 + b"\x00\x01"),
                       "compressed (compression type 1), which TensorFlow does not read"),
    "OS/2 header": (bmp(5, 3, 24, header=12), "an OS/2 BMP (12-byte header)"),
    "width 0": (bmp(0, 3, 24), "width 0: TensorFlow's BMP decoder needs a positive width"),
    "negative width": (bmp(-5, 3, 24), "width -5"),
    "height 0": (bmp(5, 0, 24), "height 0"),
    "pixel offset 0": (bmp(5, 3, 24, offset=0), "54 bytes after its pixel rows"),
    "31 bytes": (bmp(1, 1, 24)[:31], "cut short: 31 bytes, the header alone takes 32"),
    "headers only": (bmp(1, 1, 24)[:54], "54 bytes where its header implies 58"),
}


def test_bmps_are_judged_as_tensorflow_judges_them(tf):
    for name, (data, problem) in CASES.items():
        found = bmp_problem(data)
        assert (found is None) == tensorflow_decodes(tf, data), (name, found)
        if problem is None:
            assert found is None, name
        else:
            assert problem in found, (name, found)


def test_the_pixel_limit_is_tensorflows():
    """(2**31 - 1) // 8 pixels or more: refused before the size is looked at (the file would
    be gigabytes; this one is its headers)."""
    assert "16384x16384 px = 268,435,456 pixels" in bmp_problem(bmp(16384, 16384, 24, pixels=b""))
    assert "cut short" in bmp_problem(bmp(16383, 16384, 24, pixels=b""))
