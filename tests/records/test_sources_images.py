"""Image-folder sources (records/sources/images.py): every image byte for byte with its folder
label, every format, downscaling, and each bad file named (or skipped with its reason)."""

from __future__ import annotations

import pytest
from conftest import encode_jpeg, feature_values, random_pixels, read_examples

import tfopt
from tfopt.errors import SourceError


def test_round_trip_keeps_every_image_byte_for_byte_with_its_folder_label(image_folder, tmp_path):
    out = tmp_path / "out"
    result = tfopt.convert(image_folder, out, workers=1, shards=3)
    manifest = result.manifest
    assert manifest.class_names == ["cat", "dog", "emu"]
    examples = read_examples(out)
    assert len(examples) == 21 == result.num_records
    seen = set()
    for example in examples:
        relative = feature_values(example, "image/filename")[0].decode()
        label = feature_values(example, "image/class/label")[0]
        stored = feature_values(example, "image/encoded")[0]
        assert stored == (image_folder / relative).read_bytes()
        assert manifest.class_names[label] == relative.split("/")[0]
        image_format = feature_values(example, "image/format")[0].decode()
        assert image_format == ("png" if relative.endswith(".PNG") else "jpeg")
        assert feature_values(example, "image/height") == [40]
        assert feature_values(example, "image/width") == [56]
        seen.add(relative)
    assert len(seen) == 21
    # mixed formats: readers must use decode_image, and the manifest says so
    assert manifest.feature("image/encoded").encoding.value == "image"
    assert manifest.source["image_formats"] == {"jpeg": 18, "png": 3}


def test_max_size_downscales_larger_images_keeping_aspect(tmp_path, tf):
    folder = tmp_path / "images" / "only"
    folder.mkdir(parents=True)
    (folder / "big.jpg").write_bytes(encode_jpeg(random_pixels(1, 200, 100)))
    (folder / "small.jpg").write_bytes(small := encode_jpeg(random_pixels(2, 30, 20)))
    out = tmp_path / "out"
    tfopt.convert(tmp_path / "images", out, workers=1, max_size=64, quality=80)
    by_name = {feature_values(e, "image/filename")[0].decode(): e for e in read_examples(out)}
    big = by_name["only/big.jpg"]
    assert feature_values(big, "image/height") == [64]
    assert feature_values(big, "image/width") == [32]
    decoded = tf.io.decode_jpeg(feature_values(big, "image/encoded")[0])
    assert tuple(decoded.shape) == (64, 32, 3)
    assert feature_values(by_name["only/small.jpg"], "image/encoded")[0] == small  # untouched


def test_all_image_formats_and_extension_case(tmp_path):
    from conftest import GIF_1X1, encode_bmp, encode_png

    folder = tmp_path / "images" / "k"
    folder.mkdir(parents=True)
    (folder / "a.JPG").write_bytes(encode_jpeg(random_pixels(1)))
    (folder / "b.Png").write_bytes(encode_png(random_pixels(2)))
    (folder / "c.gif").write_bytes(GIF_1X1)
    (folder / "d.BMP").write_bytes(encode_bmp(random_pixels(3, 5, 7)))
    (folder / ".DS_Store").write_bytes(b"\0junk")  # hidden files are not data
    result = tfopt.convert(tmp_path / "images", tmp_path / "out", workers=1)
    assert result.manifest.source["image_formats"] == {"jpeg": 1, "png": 1, "gif": 1, "bmp": 1}
    sizes = {feature_values(e, "image/filename")[0].decode(): (feature_values(e, "image/height")[0],
             feature_values(e, "image/width")[0]) for e in read_examples(tmp_path / "out")}
    assert sizes["k/c.gif"] == (1, 1) and sizes["k/d.BMP"] == (5, 7)


def _assert_nothing_written(out):
    assert not out.exists() or not any(out.iterdir()), list(out.iterdir())


@pytest.mark.parametrize("workers, check", [(1, "structure"), (1, "decode"), (2, "structure")])
def test_truncated_image_stops_with_its_path_and_leaves_no_partial_dataset(
        image_folder, tmp_path, workers, check):
    bad = image_folder / "dog" / "003.jpg"
    bad.write_bytes(bad.read_bytes()[:600])
    out = tmp_path / "out"
    with pytest.raises(SourceError) as error:
        tfopt.convert(image_folder, out, workers=workers, shards=4, check=check)
    assert str(bad) in str(error.value)
    assert "truncated or corrupt" in str(error.value)
    _assert_nothing_written(out)


@pytest.mark.parametrize(
    "name, content, expected",
    [
        ("notes.txt", b"hello", "not an image file (extension '.txt'"),
        ("fake.jpg", b"this is text, not a jpeg", "not a JPEG, PNG, GIF or BMP image"),
        ("empty.png", b"", "empty file"),
    ],
)
def test_non_image_files_are_named(image_folder, tmp_path, name, content, expected):
    (image_folder / "cat" / name).write_bytes(content)
    out = tmp_path / "out"
    with pytest.raises(SourceError) as error:
        tfopt.convert(image_folder, out, workers=1)
    assert str(image_folder / "cat" / name) in str(error.value)
    assert expected in str(error.value)
    _assert_nothing_written(out)


def test_unreadable_file_is_named(image_folder, tmp_path):
    bad = image_folder / "cat" / "gone.jpg"
    bad.symlink_to(tmp_path / "deleted.jpg")  # a dangling link: listed, but cannot be read
    with pytest.raises(SourceError) as error:
        tfopt.convert(image_folder, tmp_path / "out", workers=1)
    assert str(error.value) == (f"{bad}: is a symbolic link to '{tmp_path / 'deleted.jpg'}', "
                                "which does not exist")


def test_empty_class_folder_and_empty_source(image_folder, tmp_path):
    (image_folder / "zebra").mkdir()
    with pytest.raises(SourceError, match="zebra: empty class folder"):
        tfopt.convert(image_folder, tmp_path / "out", workers=1)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SourceError, match="neither .npy files nor class folders"):
        tfopt.convert(empty, tmp_path / "out2", workers=1)
    with pytest.raises(SourceError, match="does not exist"):
        tfopt.convert(tmp_path / "missing", tmp_path / "out3", workers=1)


def test_skip_records_each_bad_item_with_its_reason(image_folder, tmp_path):
    truncated = image_folder / "dog" / "001.jpg"
    truncated.write_bytes(truncated.read_bytes()[:500])
    (image_folder / "cat" / "readme.txt").write_text("not an image")
    (image_folder / "zebra").mkdir()
    out = tmp_path / "out"
    result = tfopt.convert(image_folder, out, workers=1, on_error="skip", shards=2)
    assert result.num_records == 20
    reasons = {item.path: item.reason for item in result.manifest.skipped}
    assert set(reasons) == {str(truncated), str(image_folder / "cat" / "readme.txt"),
                            str(image_folder / "zebra")}
    assert "truncated or corrupt" in reasons[str(truncated)]
    # labels stay those of the sorted class folders, the empty one included
    assert result.manifest.class_names == ["cat", "dog", "emu", "zebra"]
    assert tfopt.verify(out).ok


def _names_folder(root, jpeg: bytes):
    """Class folders 'a' and Latin-1 b'caf\\xe9', each with an image named b'\\xff\\xfe.jpg'
    (bytes that are not UTF-8: Python names them with lone surrogates)."""
    import os

    for class_name in ("a", os.fsdecode(b"caf\xe9")):
        (root / class_name).mkdir(parents=True)
        (root / class_name / "ok.jpg").write_bytes(jpeg)
        (root / class_name / os.fsdecode(b"\xff\xfe.jpg")).write_bytes(jpeg)
    return root


@pytest.mark.parametrize("locale", ["utf8", "ascii"])
def test_names_that_are_not_utf8_convert_escaped_and_said_in_the_manifest(tmp_path, locale):
    import json
    import os

    from tables_helpers import REPO, run_tfopt

    jpeg = encode_jpeg(random_pixels(1))
    src = _names_folder(tmp_path / "src", jpeg)
    dst = tmp_path / "out"
    # LANG=C with UTF-8 mode and coercion off: every name beyond ASCII is surrogates, stdout
    # ASCII; strict UTF-8 on stdout otherwise, as in a real en_US.UTF-8 locale
    env = ({"LANG": "C", "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
           if locale == "ascii" else {"PYTHONIOENCODING": "utf-8:strict"})
    env = {**os.environ, "PYTHONPATH": str(REPO), **env}
    for args in (["convert", src, dst, "--workers", "1"], ["inspect", dst], ["verify", dst]):
        run = run_tfopt(args, tmp_path, env=env)
        assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
        if args[0] == "inspect":
            assert "classes (2): a, caf\\xe9" in run.stdout
    manifest = json.loads((dst / "manifest.json").read_text())
    assert manifest["class_names"] == ["a", "caf\\xe9"]
    listed = manifest["source"]["names_not_utf8"]["names"]
    assert listed[0] == "caf\\xe9" and sorted(listed[1:]) == sorted([  # the class first
        "a/\\xff\\xfe.jpg", "caf\\xe9/ok.jpg", "caf\\xe9/\\xff\\xfe.jpg"])
    # the record keeps the file name's own bytes
    names = sorted(feature_values(example, "image/filename")[0]
                   for example in read_examples(dst))
    assert names == sorted([b"a/ok.jpg", b"a/\xff\xfe.jpg", b"caf\xe9/ok.jpg",
                            b"caf\xe9/\xff\xfe.jpg"])
