"""make_demo_data's arguments (records/demo_data.py): each bad one named before anything is
written."""

from __future__ import annotations

import pytest

import tfopt


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
])
def test_bad_arguments_are_named_and_nothing_is_written(tmp_path, arguments, message):
    with pytest.raises(tfopt.InvalidArgumentError, match=message):
        tfopt.make_demo_data(tmp_path / "demo", **arguments)
    assert not (tmp_path / "demo").exists()
