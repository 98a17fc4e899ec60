"""The door to private Keras and TensorFlow names (``tfopt/_internals``): every listed name holds
on the installed releases (tests/test_layering.py checks that no module outside the door
touches such a name).

The first test runs on the newest releases (scripts/test.sh) and on the floors setup.cfg
declares (scripts/test_floor.sh): a release that drops or changes a name fails here, by name.
"""

from __future__ import annotations

import pytest

import tfopt._internals as internals
from tfopt._internals import INTERNALS, Internal, problem


@pytest.mark.parametrize("internal", INTERNALS, ids=[internal.name for internal in INTERNALS])
def test_each_private_name_holds_on_the_installed_releases(tf, internal):
    found = problem(internal)
    assert found is None, (f"{internal.name}: {found} in {internals.installed_releases()} "
                           f"(tested on {internals.tested_releases()}); without it "
                           f"{internal.without_it}")


def test_a_changed_name_is_reported_with_its_parameters(tf):
    changed = Internal("keras.Layer._flatten_layers", "a test", "nothing",
                       INTERNALS[0].resolve, ("self", "recursive"))
    assert problem(changed) == ("parameters changed: (self, include_self, recursive), tested "
                                "with (self, recursive)")
    gone = Internal("keras.Layer._gone", "a test", "nothing",
                    lambda: __import__("keras").Layer._gone)
    assert problem(gone).startswith("not found (AttributeError")


def test_the_door_says_what_a_missing_fix_costs(tf, monkeypatch, caplog):
    import keras

    from tfopt._internals import keras_optimizer

    optimizer = keras.optimizers.SGD(gradient_accumulation_steps=2)
    owner = next(cls for cls in type(optimizer).__mro__ if "_backend_apply_gradients" in vars(cls))
    monkeypatch.delattr(owner, "_backend_apply_gradients")
    monkeypatch.setattr("tfopt._internals._WARNED", set())
    with caplog.at_level("WARNING", logger="tfopt"):
        assert keras_optimizer.install_replica_apply_gradients(optimizer) is False
    assert "keras.optimizers.Optimizer._backend_apply_gradients is not in Keras" in caplog.text
    assert "fails there" in caplog.text
