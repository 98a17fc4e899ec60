"""make_demo_data (records/demo_data.py): each bad argument named before anything is written;
--overwrite replaces only demo images, as convert --overwrite replaces only shards."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import tfopt
from tfopt.cli import cli
from tfopt.errors import InvalidArgumentError

SMALL = ["--classes", "2", "--min-size", "16", "--max-size", "16", "--workers", "1", "-q"]


def _demo(dst, count, *extra):
    return CliRunner().invoke(cli, ["demo-data", str(dst), "--count", str(count), *SMALL, *extra])


def _files(folder):
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


def _refused(result, *names):
    assert result.exit_code == 1, result.output
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("tfopt: error: ") and all(name in line for name in names), line


def test_overwrite_replaces_earlier_demo_images(tmp_path):
    images = tmp_path / "images"
    assert _demo(images, 8).exit_code == 0
    assert _demo(images, 4, "--overwrite").exit_code == 0
    assert _files(images) == ["circle", "circle/00000.jpg", "circle/00001.jpg",
                              "square", "square/00000.jpg", "square/00001.jpg"]
    assert [path.name for path in tmp_path.iterdir()] == ["images"]  # no temporary folder left


def test_overwrite_refuses_a_converted_dataset_and_foreign_files(tmp_path):
    images = tmp_path / "images"
    assert _demo(images, 4).exit_code == 0
    dataset = tmp_path / "dataset"
    tfopt.convert(images, dataset, workers=1)
    before = _files(dataset)
    _refused(_demo(dataset, 4, "--overwrite"), str(dataset), "manifest.json")
    _refused(_demo(dataset, 4), str(dataset), "manifest.json")
    assert _files(dataset) == before
    (images / "circle" / "notes.txt").write_text("mine")  # inside a class folder
    _refused(_demo(images, 4, "--overwrite"), str(images), "circle/notes.txt")
    assert (images / "circle" / "notes.txt").read_text() == "mine"


def test_an_existing_empty_folder_is_filled_only_once_complete(tmp_path, monkeypatch):
    import tfopt.records.demo_data as demo_data

    images = tmp_path / "images"
    images.mkdir()
    link = tmp_path / "link"
    link.symlink_to(images)
    write_images = demo_data._write_images

    def write_then_interrupt(*args):
        write_images(*args)  # the first images are on disk
        raise KeyboardInterrupt

    monkeypatch.setattr(demo_data, "_write_images", write_then_interrupt)
    assert _demo(link, 4).exit_code == 1
    assert _files(images) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["images", "link"]
    monkeypatch.setattr(demo_data, "_write_images", write_images)
    assert _demo(link, 4).exit_code == 0
    assert link.is_symlink() and len(_files(images)) == 6  # 2 class folders, 4 images
    assert sorted(p.name for p in tmp_path.iterdir()) == ["images", "link"]


@pytest.mark.parametrize("arguments, message", [
    ({"classes": 1}, r"^classes=1: expected an int from 2 to 10"),
    ({"classes": 2.0}, r"^classes=2\.0: expected an int from 2 to 10"),
    ({"count": 3, "classes": 4}, r"^count=3: expected an int >= classes \(4\)"),
    ({"count": True}, r"^count=True: expected an int >= classes"),
    ({"min_size": 8}, r"^min_size=8: expected an int from 16 to"),
    ({"min_size": 64, "max_size": 32}, r"^max_size=32: expected an int from min_size \(64\)"),
    ({"seed": "1"}, r"^seed='1': expected an int >= 0"),
    ({"workers": 0}, r"^workers=0: expected an int >= 1, or None"),
    ({"overwrite": "yes"}, r"^overwrite='yes': expected True or False"),
    ({"kind": "videos"}, r"^kind='videos' is not one of: shapes, photos"),
    ({"kind": "photos", "max_size": 9000}, r"^max_size=9000: expected an int from min_size "
                                            r"\(2000\) to 8192"),
])
def test_bad_arguments_are_named_and_nothing_is_written(tmp_path, arguments, message):
    with pytest.raises(InvalidArgumentError, match=message):
        tfopt.make_demo_data(tmp_path / "demo", **arguments)
    assert not (tmp_path / "demo").exists()


def test_photos_are_camera_sized_deterministic_jpegs_with_natural_statistics(tmp_path):
    from tfopt.records.image_header import image_size

    made = tfopt.make_demo_data(tmp_path / "a", count=4, classes=2, kind="photos", workers=1)
    assert made.class_names == ["amber", "azure"]
    files = sorted((tmp_path / "a").rglob("*.jpg"))
    assert len(files) == 4
    for path in files:
        data = path.read_bytes()
        height, width = image_size(data)
        assert 2000 <= max(height, width) <= 4000  # the longer side
        assert round(max(height, width) / min(height, width), 2) in (1.33, 1.5)
        assert 0.15 < len(data) / (height * width) < 0.6  # bytes a pixel: a photo's, not a flat
    again = tfopt.make_demo_data(tmp_path / "b", count=4, classes=2, kind="photos", workers=2)
    assert again.num_bytes == made.num_bytes
    assert [p.read_bytes() for p in files] == [
        p.read_bytes() for p in sorted((tmp_path / "b").rglob("*.jpg"))]
    # a photos folder is demo-data's own: --overwrite replaces it
    result = CliRunner().invoke(cli, ["demo-data", str(tmp_path / "a"), "--count", "2",
                                      "--classes", "2", "--kind", "photos", "--min-size", "600",
                                      "--max-size", "800", "--workers", "1", "--overwrite",
                                      "-q"])
    assert result.exit_code == 0, result.output
    assert len(list((tmp_path / "a").rglob("*.jpg"))) == 2
