"""The one module of argument checks: what each accepts, and how each names a bad value."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tfopt import _validate as v
from tfopt.errors import InvalidArgumentError


@pytest.mark.parametrize("value", [3, np.int64(3), np.uint8(3)])
def test_whole_number_accepts_python_and_numpy_integers(value):
    assert v.whole_number(value, "n", 1) == 3 and type(v.whole_number(value, "n", 1)) is int


@pytest.mark.parametrize("value", [True, np.bool_(True), 2.5, 3.0, "3", None, [3]])
def test_whole_number_refuses_what_is_not_an_integer(value):
    with pytest.raises(InvalidArgumentError, match=r"^shards=.*: expected an int >= 1$"):
        v.whole_number(value, "shards", 1)


def test_whole_number_bounds_and_their_wording():
    assert v.whole_number(-4, "seed") == -4
    with pytest.raises(InvalidArgumentError, match=r"quality=101: expected an int from 1 to 100"):
        v.whole_number(101, "quality", 1, maximum=100)
    with pytest.raises(InvalidArgumentError, match=r"n=0: expected a positive count"):
        v.whole_number(0, "n", 1, "a positive count")
    assert v.optional_whole_number(None, "n", 1) is None


def test_number_bounds_open_and_closed():
    assert v.number(0, "f", low=0, high=1, open_high=True) == 0.0
    for bad in (1.0, -0.1, math.nan, math.inf, True, "0.5"):
        with pytest.raises(InvalidArgumentError, match=r"^f=.*: expected a finite number in "
                                                       r"\[0, 1\)$"):
            v.number(bad, "f", low=0, high=1, open_high=True)


def test_flag_takes_only_bools():
    assert v.flag(np.bool_(False), "x") is False
    for bad in (1, "yes", None):
        with pytest.raises(InvalidArgumentError, match="expected True or False"):
            v.flag(bad, "x")


def test_pairs_and_sequences():
    assert v.size_pair(224, "image_size") == (224, 224)
    assert v.size_pair((160, np.int32(96)), "image_size") == (160, 96)
    for bad in (0, (1, 2, 3), (1.5, 2), "224"):
        with pytest.raises(InvalidArgumentError, match="image_size="):
            v.size_pair(bad, "image_size")
    assert v.number_pair((0.1, 1), "scale", 0, 1, "0 < a <= b <= 1") == (0.1, 1.0)
    with pytest.raises(InvalidArgumentError, match="scale=.*0 < a <= b <= 1"):
        v.number_pair((0.5, 0.1), "scale", 0, 1, "0 < a <= b <= 1")
    assert v.numbers_above(2, "std", 0, "positive") == (2.0,)
    with pytest.raises(InvalidArgumentError, match="std=\\(\\): expected positive"):
        v.numbers_above((), "std", 0, "positive")


def test_choice_takes_a_member_or_its_value_in_any_case():
    import enum

    class Kind(str, enum.Enum):
        CNN = "cnn"
        MLP = "mlp"

    assert v.choice(Kind, Kind.MLP, "model") is Kind.MLP
    assert v.choice(Kind, "CNN", "model") is Kind.CNN
    with pytest.raises(InvalidArgumentError, match=r"^model='rnn' is not one of: cnn, mlp$"):
        v.choice(Kind, "rnn", "model")


def test_known_options_names_the_unknown_and_the_allowed():
    v.known_options({"shards": 3}, ["shards", "seed"], "convert")
    with pytest.raises(InvalidArgumentError,
                       match=r"^convert: unknown option\(s\) shard; expected one of: shards, seed$"):
        v.known_options({"shard": 3}, ["shards", "seed"], "convert")
