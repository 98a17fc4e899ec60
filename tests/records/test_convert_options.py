"""The options of convert (records/convert/options.py) and the keywords convert() takes."""

from __future__ import annotations

import math
import re

import pytest

import tfopt
from tfopt.errors import InvalidArgumentError
from tfopt.records.convert.options import ConvertOptions


def test_invalid_options_name_the_argument():
    with pytest.raises(InvalidArgumentError, match=r"val_fraction=1\.5"):
        ConvertOptions(val_fraction=1.5)
    with pytest.raises(InvalidArgumentError, match="compression='zip' is not one of: none, gzip"):
        ConvertOptions(compression="zip")
    with pytest.raises(InvalidArgumentError, match="on_error"):
        ConvertOptions(on_error="ignore")
    with pytest.raises(InvalidArgumentError, match="exclude each other"):
        ConvertOptions(overwrite=True, resume=True)


@pytest.mark.parametrize("field, value, expected", [
    ("shards", 2.5, "an int >= 1, or None"),
    ("shards", 0, "an int >= 1, or None"),
    ("workers", True, "an int >= 1, or None for all usable cores"),
    ("workers", 0, "an int >= 1, or None for all usable cores"),
    ("quality", 90.5, "an int from 1 to 100"),
    ("quality", 101, "an int from 1 to 100"),
    ("shard_size", 1.5, "a positive int of bytes"),
    ("max_size", True, "an int >= 8 \\(pixels\\)"),
    ("max_size", 4, "an int >= 8 \\(pixels\\)"),
    ("max_pixels", 0, "an int >= 1 \\(pixels per image, height x width\\), or None"),
    ("max_pixels", 2.5e8, "an int >= 1 \\(pixels per image, height x width\\), or None"),
    ("max_pixels", True, "an int >= 1 \\(pixels per image, height x width\\), or None"),
    ("seed", "3", "an int >= 0"),
    ("seed", -1, "an int >= 0"),
    ("val_fraction", math.nan, "a finite number in \\[0, 1\\)"),
    ("val_fraction", math.inf, "a finite number in \\[0, 1\\)"),
    ("val_fraction", 1, "a finite number in \\[0, 1\\)"),
    ("val_fraction", -0.1, "a finite number in \\[0, 1\\)"),
    ("val_fraction", "0.1", "a finite number in \\[0, 1\\)"),
    ("overwrite", 1, "True or False"),
    ("resume", "yes", "True or False"),
    ("label", 3, "the name of a column \\(CSV, Parquet\\), array \\(NumPy\\) or dataset"),
    ("group", 3, "the name of a group in an HDF5 file, or None for its root"),
    ("group", "", "the name of a group in an HDF5 file"),
])
def test_a_bad_value_names_the_field_the_value_and_what_is_allowed(field, value, expected):
    shown = re.escape(repr(value))
    with pytest.raises(InvalidArgumentError, match=f"^{field}={shown}: expected {expected}"):
        ConvertOptions(**{field: value})


def test_values_come_back_in_their_plain_python_types():
    import numpy as np

    options = ConvertOptions(seed=np.int64(3), shards=np.int32(2), val_fraction=np.float32(0.5))
    assert (type(options.seed), type(options.shards), type(options.val_fraction)) == (
        int, int, float)


def test_workers_keeps_what_was_asked_for():
    # None means "all usable cores of the machine that runs it": resolved by convert, not here
    assert ConvertOptions().workers is None
    assert ConvertOptions(workers=3).workers == 3
    assert "workers" not in ConvertOptions().plan_fields()


def test_an_unknown_keyword_of_convert_names_it_and_the_valid_ones(tmp_path):
    with pytest.raises(InvalidArgumentError,
                       match=r"convert: unknown option\(s\) shard; expected one of: .*\bshards\b"):
        tfopt.convert(tmp_path / "images", tmp_path / "out", shard=3)
    with pytest.raises(InvalidArgumentError, match="unknown option.*shard"):
        tfopt.convert(tmp_path / "images", tmp_path / "out", ConvertOptions(), shard=3)
    with pytest.raises(InvalidArgumentError, match="options=.*expected a ConvertOptions"):
        tfopt.convert(tmp_path / "images", tmp_path / "out", {"shards": 3})
    assert not (tmp_path / "out").exists()
