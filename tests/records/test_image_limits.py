"""Decoded-size limits (records/image_limits.py): what TensorFlow's decoders refuse for size,
frame type or precision, and the pixel limit, judged from headers; refused by convert naming
the file before anything is decoded, flagged by verify with shard and record index.

Every hostile image is built byte by byte at test time (hostile_images_helpers.py) and none is
decoded whole: a claimed 60000x60000 JPEG is a few hundred bytes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hostile_images_helpers import (
    bmp_header,
    gif_header,
    handmade_jpeg,
    one_colour_png,
    png_header,
)
from records_helpers import no_tensorflow_env

import tfopt
from tfopt.records.format.example_pb import example_classes
from tfopt.records.format.framing import read_records
from tfopt.records.image_header import ImageFormat, JpegStructure, jpeg_structure, png_problem
from tfopt.records.image_limits import (
    DEFAULT_MAX_PIXELS,
    TF_MAX_JPEG_BYTES,
    encoded_image_problem,
    header_problem,
    record_image_check,
    recorded_max_pixels,
)
from tfopt.records.image_structure import StructureVerdict
from tfopt.records.manifest import MANIFEST_NAME, read_manifest
from tfopt.records.verify import ProblemKind, verify

# name -> (image, what the refusal says): TensorFlow refuses each of these (checked below)
TENSORFLOW_REFUSES = {
    "huge.jpg": (handmade_jpeg(14000, 14000),
                 "decoded size 14000x14000x3 = 588.0 MB: TensorFlow refuses to decode JPEGs of "
                 "2**29 bytes (536.9 MB) or more"),
    "claims_60000.jpg": (handmade_jpeg(60000, 60000), "decoded size 60000x60000x3 = 10.8 GB"),
    "twelve_bit.jpg": (handmade_jpeg(64, 48, precision=12),
                       "12-bit JPEG: TensorFlow decodes 8-bit JPEGs only"),
    "lossless.jpg": (handmade_jpeg(64, 48, marker=0xC3), "lossless JPEG (SOF3, marker 0xffc3)"),
    "hierarchical.jpg": (handmade_jpeg(64, 48, marker=0xC5), "hierarchical (differential "
                         "sequential) JPEG (SOF5"),
    "wide.jpg": (handmade_jpeg(65501, 8, components=1), "sides of at most 65,500 px"),
    "huge.png": (png_header(23171, 23171, image_data=b"x"),
                 "23171x23171 px = 536,895,241 pixels: TensorFlow refuses to decode PNGs of 2**29"),
    "tall.png": (png_header(1, 1 << 27, image_data=b"x"), "a side of 2**27 (134,217,728) px"),
}
# decodable by TensorFlow, but over the default pixel limit
OVER_THE_PIXEL_LIMIT = {
    "flat.png": (one_colour_png(20000, 20000),
                 "20000x20000 px = 400,000,000 pixels, 1.2 GB decoded as RGB: over the limit "
                 "of 178,956,970 pixels"),
    "grey.jpg": (handmade_jpeg(20000, 20000, components=1), "20000x20000 px = 400,000,000 pixels"),
    "huge.gif": (gif_header(65535, 65535), "65535x65535 px = 4,294,836,225 pixels"),
    "huge.bmp": (bmp_header(16000, 16000), "16000x16000 px = 256,000,000 pixels"),
}
DECODABLE = {
    "small.jpg": handmade_jpeg(64, 48),
    "extended.jpg": handmade_jpeg(64, 48, marker=0xC1),
    "arithmetic.jpg": handmade_jpeg(64, 48, marker=0xC9),
    "grey.jpg": handmade_jpeg(64, 48, components=1),
    "wide.jpg": handmade_jpeg(65500, 8, components=1),
    "flat.png": one_colour_png(300, 200),
}


def _problem(data: bytes, max_pixels=DEFAULT_MAX_PIXELS):
    return encoded_image_problem(data, max_pixels=max_pixels)


@pytest.mark.parametrize("name", sorted(TENSORFLOW_REFUSES))
def test_what_tensorflow_refuses_is_named_from_the_header(name):
    data, reason = TENSORFLOW_REFUSES[name]
    assert reason in _problem(data)
    assert reason in _problem(data, max_pixels=None)  # no pixel limit lifts TensorFlow's own


@pytest.mark.parametrize("name", sorted(OVER_THE_PIXEL_LIMIT))
def test_images_over_the_pixel_limit_are_named_with_their_size(name):
    data, reason = OVER_THE_PIXEL_LIMIT[name]
    assert reason in _problem(data)
    assert _problem(data, max_pixels=None) is None


@pytest.mark.parametrize("name", sorted(DECODABLE))
def test_images_tensorflow_decodes_within_the_limit_pass(name):
    assert _problem(DECODABLE[name]) is None


def test_the_default_limit_is_tensorflows_own_for_rgb_jpegs():
    assert DEFAULT_MAX_PIXELS * 3 < TF_MAX_JPEG_BYTES <= (DEFAULT_MAX_PIXELS + 1) * 3
    assert _problem(handmade_jpeg(13377, 13377)) is None  # 178,944,129 px
    assert "2**29 bytes" in _problem(handmade_jpeg(13378, 13377))  # 178,957,506 px
    assert "over the limit of 2,000 pixels" in _problem(handmade_jpeg(64, 48), max_pixels=2000)
    assert _problem(handmade_jpeg(64, 48), max_pixels=3072) is None


def test_one_colour_png_builder_writes_a_whole_png():
    """The repeated-piece stream inflates, Adler-32 and all, to exactly the IHDR's bytes."""
    assert png_problem(one_colour_png(2000, 1500)) is None  # several pieces and a tail
    assert len(OVER_THE_PIXEL_LIMIT["flat.png"][0]) < 2_000_000


def test_header_problem_takes_the_format_sniffed(tmp_path):
    data = handmade_jpeg(64, 48, precision=12)
    assert "12-bit" in header_problem(data, ImageFormat.JPEG, 48, 64, max_pixels=None)
    assert "not a JPEG, PNG, GIF or BMP image" in _problem(b"hello, not an image at all")
    assert "malformed png header" in _problem(b"\x89PNG\r\n\x1a\n" + bytes(8))


def test_tensorflow_refuses_what_is_rejected_and_decodes_what_passes(tf):
    """The verdicts above, against TensorFlow's decoder itself (each refusal comes before it
    allocates: nothing here decodes more than a few MB)."""

    def decodes(data):
        try:
            tf.io.decode_image(data, channels=3, expand_animations=False)
        except tf.errors.OpError:
            return False
        return True

    def tfopt_rejects(data):
        structure = jpeg_structure(data) if data.startswith(b"\xff\xd8") else JpegStructure(None)
        return bool(_problem(data, max_pixels=None) or structure.problem)

    walk_only = [handmade_jpeg(32, 32, sampling=(0x22, 0x22, 0x22)),  # too many blocks per MCU
                 handmade_jpeg(32, 32, sampling=(0x31, 0x21, 0x11)),  # fractional sampling
                 handmade_jpeg(16, 16, extra=b"\xff\xc8\x00\x04ab")]  # the JPG marker
    for data in [image for image, _ in TENSORFLOW_REFUSES.values()] + walk_only:
        assert not decodes(data) and tfopt_rejects(data), data[:24]
    for data in DECODABLE.values():
        assert decodes(data) and not tfopt_rejects(data), data[:24]
    # the size alone is why: the same image data decodes at 1/8 scale (1750x1750x3)
    assert tf.io.decode_jpeg(TENSORFLOW_REFUSES["huge.jpg"][0], ratio=8).shape == (1750, 1750, 3)
    assert int(tf.reduce_max(tf.io.decode_png(DECODABLE["flat.png"]))) == 0


def test_recorded_max_pixels_reads_the_manifest_options_or_falls_back():
    assert recorded_max_pixels({}) == DEFAULT_MAX_PIXELS  # written before the option
    assert recorded_max_pixels({"max_pixels": None}) is None
    assert recorded_max_pixels({"max_pixels": 500}) == 500
    for hostile in ("many", True, 0, -3, 2.5):
        assert recorded_max_pixels({"max_pixels": hostile}) == DEFAULT_MAX_PIXELS
    assert recorded_max_pixels(["not", "a", "dict"]) == DEFAULT_MAX_PIXELS


def test_record_image_check_names_what_is_wrong_with_a_record():
    Example = example_classes().Example

    def record(**values):
        example = Example()
        for key, value in values.items():
            example.features.feature[key].bytes_list.value.extend(value)
        return example.SerializeToString()

    check = record_image_check("image/encoded", DEFAULT_MAX_PIXELS)
    assert check(record(**{"image/encoded": [handmade_jpeg(64, 48)]})) is None
    assert "'image/encoded': 12-bit JPEG" in check(record(**{"image/encoded": [
        handmade_jpeg(64, 48, precision=12)]}))
    assert check(record(other=[b"x"])) == "no image feature 'image/encoded'"
    assert "holds 2 byte strings" in check(record(**{"image/encoded": [b"a", b"b"]}))
    assert check(b"\xff\xff\xff") == "not a tf.train.Example"


def _folder(tmp_path, bad: dict, name="images"):
    """Class ``good`` of two decodable images, class ``bad`` of ``bad`` and one good one."""
    root = tmp_path / name
    for relative, data in {"good/1.jpg": DECODABLE["small.jpg"], "good/2.png": DECODABLE["flat.png"],
                           "bad/ok.jpg": DECODABLE["grey.jpg"],
                           **{f"bad/{key}": value for key, value in bad.items()}}.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(data)
    return root


def _convert(tmp_path, src, out, *args):
    """``tfopt convert`` with TensorFlow unimportable (nothing here may decode), under a
    wrapper that reports the largest memory any of its children used."""
    wrapper = ("import resource, subprocess, sys; "
               "code = subprocess.run(sys.argv[1:]).returncode; "
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
               "sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", wrapper, sys.executable, "-m", "tfopt", "convert",
                           str(src), str(out), "--workers", "1", "-q", *args],
                          capture_output=True, text=True, timeout=120,
                          env=no_tensorflow_env(tmp_path))
    *messages, peak_kib = done.stderr.strip().splitlines()
    return done.returncode, done.stdout, "\n".join(messages), int(peak_kib) << 10


def test_convert_skips_every_hostile_image_with_its_reason_and_little_memory(tmp_path):
    bad = {name: data for name, (data, _) in {**TENSORFLOW_REFUSES, **OVER_THE_PIXEL_LIMIT}.items()}
    src = _folder(tmp_path, bad)
    code, _, messages, peak = _convert(tmp_path, src, tmp_path / "out", "--on-error", "skip")
    assert code == 0, messages
    manifest = read_manifest(tmp_path / "out")
    assert manifest.num_records == 3 and manifest.options["max_pixels"] == DEFAULT_MAX_PIXELS
    reasons = {item.path: item.reason for item in manifest.skipped}
    assert set(reasons) == {str(src / "bad" / name) for name in bad}
    for name in bad:
        expected = {**TENSORFLOW_REFUSES, **OVER_THE_PIXEL_LIMIT}[name][1]
        assert expected in reasons[str(src / "bad" / name)]
    assert "truncated or corrupt" not in "".join(reasons.values())
    # the 20000x20000 PNG is refused from its IHDR: inflating it would take 1.2 GB
    assert peak < 400 << 20, peak
    assert verify(tmp_path / "out").ok


@pytest.mark.parametrize("args", [(), ("--max-size", "320")])
def test_convert_stops_at_a_refused_image_naming_it_and_why(tmp_path, args):
    """Before this was checked, --max-size called such a file "truncated or corrupt"."""
    src = _folder(tmp_path, {"huge.jpg": TENSORFLOW_REFUSES["huge.jpg"][0]})
    code, _, messages, _ = _convert(tmp_path, src, tmp_path / "out", *args)
    assert code == 1
    assert messages == (f"tfopt: error: {src / 'bad' / 'huge.jpg'}: "
                        f"{_problem(TENSORFLOW_REFUSES['huge.jpg'][0])}")
    assert not (tmp_path / "out" / MANIFEST_NAME).exists()


def test_max_pixels_sets_the_limit_and_is_recorded(tmp_path):
    src = _folder(tmp_path, {"grey_big.jpg": OVER_THE_PIXEL_LIMIT["grey.jpg"][0]})
    code, _, messages, _ = _convert(tmp_path, src, tmp_path / "small", "--max-pixels", "3000")
    assert code == 1 and "over the limit of 3,000 pixels" in messages, messages
    code, stdout, messages, _ = _convert(tmp_path, src, tmp_path / "big", "--max-pixels",
                                         "400000000", "--json")
    assert code == 0 and json.loads(stdout)["records"] == 4, messages
    assert read_manifest(tmp_path / "big").options["max_pixels"] == 400_000_000
    code, _, messages, _ = _convert(tmp_path, src, tmp_path / "zero", "--max-pixels", "0")
    assert code == 2 and "--max-pixels" in messages


def _filenames(shard):
    parse = example_classes().Example.FromString
    return [parse(record).features.feature["image/filename"].bytes_list.value[0].decode()
            for record in read_records(shard)]


def test_verify_flags_records_of_a_dataset_written_before_the_limits(tmp_path, monkeypatch):
    """An older tfopt stored what convert refuses now: verify names each such record."""
    from tfopt.records.sources import images

    stored = {"huge.jpg": TENSORFLOW_REFUSES["huge.jpg"][0],
              "twelve_bit.jpg": TENSORFLOW_REFUSES["twelve_bit.jpg"][0],
              "lossless.jpg": TENSORFLOW_REFUSES["lossless.jpg"][0],
              "grey_big.jpg": OVER_THE_PIXEL_LIMIT["grey.jpg"][0]}
    src = _folder(tmp_path, stored)
    with monkeypatch.context() as older_tfopt:  # no header check, the walk of before
        older_tfopt.setattr(images, "header_problem", lambda *args, **kwargs: None)
        older_tfopt.setattr(images, "structure_verdict",
                            lambda *args, **kwargs: StructureVerdict(None))
        tfopt.convert(src, tmp_path / "old", workers=1, shards=2)
    manifest_path = tmp_path / "old" / MANIFEST_NAME
    manifest = json.loads(manifest_path.read_text())
    del manifest["options"]["max_pixels"]  # its manifest predates the option
    manifest_path.write_text(json.dumps(manifest))

    result = verify(tmp_path / "old")
    flagged = {}
    for problem in result.problems:
        assert problem.kind is ProblemKind.IMAGE and problem.record is not None
        name = _filenames(problem.file)[problem.record]
        flagged[name] = problem.detail
    assert set(flagged) == {f"bad/{name}" for name in stored}
    for name, data in stored.items():
        assert flagged[f"bad/{name}"] == f"image 'image/encoded': {_problem(data)}"
    assert result.num_records == 7  # every record still read and counted

    cli = subprocess.run([sys.executable, "-m", "tfopt", "verify", str(tmp_path / "old")],
                         capture_output=True, text=True, timeout=60,
                         env=no_tensorflow_env(tmp_path))
    assert cli.returncode == 1
    lines = [line for line in cli.stdout.splitlines() if line.startswith("PROBLEM")]
    assert len(lines) == 4 and all(" record " in line and ": image: " in line for line in lines)
    assert "FAILED: 4 problem(s)" in cli.stdout


def test_verify_keeps_to_the_limit_the_dataset_was_converted_with(tmp_path):
    src = _folder(tmp_path, {"grey_big.jpg": OVER_THE_PIXEL_LIMIT["grey.jpg"][0]})
    tfopt.convert(src, tmp_path / "out", workers=1, max_pixels=None)
    assert verify(tmp_path / "out").ok
