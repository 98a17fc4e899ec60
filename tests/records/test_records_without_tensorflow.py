"""Records without TensorFlow: the same bytes as TensorFlow's writer path, read back by
TensorFlow's own parser, and convert (of every source kind), verify and inspect run with
TensorFlow unimportable."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import GIF_1X1, encode_bmp, encode_png, make_image_folder, random_pixels
from image_formats_helpers import (
    JPEG_FIXTURES,
    bmp,
    checkered,
    fixture_jpeg,
    gif,
    gif_frame,
    one_colour_gif,
)
from records_helpers import (
    no_tensorflow_env,
    parse_with_tensorflow,
    shard_bytes,
    tensorflow_writer_path,
    write_csv_source,
    write_numpy_source,
)
from tables_helpers import write_hdf5_source, write_parquet_source

import tfopt


def _image_source(tmp_path):
    """JPEGs (sequential, progressive, arithmetic-coded), PNGs, GIFs and BMPs: all judged
    without a decode."""
    folder = make_image_folder(tmp_path / "images", per_class=5)
    for index in range(3):
        (folder / "dog" / f"p{index}.png").write_bytes(encode_png(random_pixels(50 + index)))
    for name in JPEG_FIXTURES:
        (folder / "emu" / name).write_bytes(fixture_jpeg(name))
    (folder / "cat" / "tiny.gif").write_bytes(GIF_1X1)
    (folder / "cat" / "animated.gif").write_bytes(
        gif(6, 4, [gif_frame(checkered(6, 4), 6, 4), gif_frame(checkered(3, 2), 3, 2, left=2)]))
    (folder / "cat" / "photo.bmp").write_bytes(encode_bmp(random_pixels(60, 9, 7)))
    (folder / "cat" / "grey.bmp").write_bytes(bmp(5, -3, 8, palette=256))
    return folder


def _sources(tmp_path):
    return {"images": (_image_source(tmp_path), {}),
            "numpy": (write_numpy_source(tmp_path), {"label": "y"}),
            "csv": (write_csv_source(tmp_path), {"label": "label"}),
            "parquet": (write_parquet_source(tmp_path), {"label": "label"}),
            "hdf5": (write_hdf5_source(tmp_path), {"label": "y"})}


@pytest.mark.parametrize("compression", [None, "gzip"])
@pytest.mark.parametrize("kind", ["images", "numpy", "csv", "parquet", "hdf5"])
def test_shards_are_byte_identical_to_the_tensorflow_writer_path(tmp_path, monkeypatch, kind,
                                                                 compression):
    src, options = _sources(tmp_path)[kind]
    options = {**options, "workers": 1, "shards": 3, "seed": 5, "val_fraction": 0.2,
               "compression": compression}
    with tensorflow_writer_path(monkeypatch):
        before = tfopt.convert(src, tmp_path / "before", **options)
    after = tfopt.convert(src, tmp_path / "after", **options)
    assert shard_bytes(tmp_path / "after") == shard_bytes(tmp_path / "before")
    assert len(shard_bytes(tmp_path / "after")) == 4  # 3 training shards and a validation one
    assert [(s.file, s.sha256, s.num_records) for s in after.manifest.shards] == \
        [(s.file, s.sha256, s.num_records) for s in before.manifest.shards]
    rows = parse_with_tensorflow(tmp_path / "after")
    assert len(rows) == after.num_records == before.num_records
    assert tfopt.verify(tmp_path / "after").ok


def test_tensorflow_parses_every_value_written(tmp_path):
    src = write_numpy_source(tmp_path)
    tfopt.convert(src, tmp_path / "out", label="y", workers=1, shards=2, seed=0)
    rows = parse_with_tensorflow(tmp_path / "out")
    arrays = np.load(src)
    ids = sorted(int(row["ids"][0]) for row in rows)
    assert ids == list(range(90))
    for row in rows:
        index = int(row["ids"][0])
        assert int(row["y"][0]) == arrays["y"][index]
        np.testing.assert_array_equal(row["x"], arrays["x"][index].ravel())


def _run(args, env, cwd):
    return subprocess.run([sys.executable, "-m", "tfopt", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_convert_verify_inspect_run_with_tensorflow_unimportable(tmp_path):
    env = no_tensorflow_env(tmp_path)
    blocked = subprocess.run([sys.executable, "-c", "import tensorflow"], env=env,
                             capture_output=True, text=True)
    assert blocked.returncode != 0 and "unimportable" in blocked.stderr
    for kind, (src, options) in _sources(tmp_path).items():
        dst = tmp_path / f"out-{kind}"
        args = ["convert", str(src), str(dst), "--workers", "2", "--shards", "3", "-q",
                "--val-fraction", "0.2"]
        args += ["--label", options["label"]] if "label" in options else []
        if kind == "numpy":
            args += ["--compression", "gzip"]
        run = _run(args, env, tmp_path)
        assert run.returncode == 0, run.stderr
        if kind in ("parquet", "hdf5"):
            continue  # verify and inspect read shards alike whatever their source
        run = _run(["verify", str(dst), "--json", "-q"], env, tmp_path)
        assert run.returncode == 0, run.stderr
        assert json.loads(run.stdout)["ok"]
        for extra in ([], ["--fast"]):
            run = _run(["inspect", str(dst), "--json", "-q", *extra], env, tmp_path)
            assert run.returncode == 0, run.stderr
            assert json.loads(run.stdout)["num_records"] > 0
    # and what they wrote is what TensorFlow reads
    assert len(parse_with_tensorflow(tmp_path / "out-images")) == tfopt.inspect(
        tmp_path / "out-images", fast=True).num_records
    assert tfopt.verify(tmp_path / "out-csv").ok
    assert len(parse_with_tensorflow(tmp_path / "out-parquet")) == 80
    assert len(parse_with_tensorflow(tmp_path / "out-hdf5")) == 70


def test_a_gif_past_the_lzw_budget_needs_tensorflow_only_in_the_process_that_meets_it(tmp_path):
    """4.2 million pixels of GIF frames: a decode is cheaper than tfopt's own LZW check."""
    folder = make_image_folder(tmp_path / "images", per_class=2)
    (folder / "cat" / "large.gif").write_bytes(one_colour_gif(2100, 2000))
    run = _run(["convert", str(folder), str(tmp_path / "out"), "--workers", "1", "-q"],
               no_tensorflow_env(tmp_path), tmp_path)
    assert run.returncode == 1
    assert "a GIF of 4,200,000 pixels to check" in run.stderr
    assert "needs TensorFlow, which cannot be imported here" in run.stderr
    run = subprocess.run([sys.executable, "-m", "tfopt", "convert", str(folder),
                          str(tmp_path / "out2"), "--workers", "1", "-q"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
