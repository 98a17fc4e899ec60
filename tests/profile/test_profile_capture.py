"""tfopt profile's script runner on real scripts: argv, __main__, the script's folder, the
fit caught and the script stopped there, and the ways a script can end without a fit."""

import textwrap

import pytest

from tfopt.errors import InvalidArgumentError
from tfopt.profile.capture import run_script

PRELUDE = textwrap.dedent("""
    import sys
    import keras
    import numpy as np
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.zeros((64, 4), "float32"), np.zeros((64, 1), "float32")
""")


def write(tmp_path, body, name="train.py"):
    path = tmp_path / name
    path.write_text(PRELUDE + textwrap.dedent(body))
    return path


def test_the_chosen_fit_is_caught_with_its_arguments_and_the_script_stops_there(tmp_path):
    (tmp_path / "helper.py").write_text("VALUE = 7\n")
    script = write(tmp_path, """
        import helper  # the script's folder is importable
        assert __name__ == "__main__"
        open(sys.argv[1], "w").write(" ".join(sys.argv[2:]) + f" {helper.VALUE}")
        model.fit(x, y, batch_size=8, epochs=1, verbose=0)  # the first: trains as written
        model.fit(x, y, batch_size=16, epochs=2, verbose=0)
        open("after.txt", "w").write("the script went on")
    """)
    seen = []
    outcome = run_script(script, [str(tmp_path / "argv.txt"), "--lr", "0.1"],
                         lambda call: seen.append(call) or "measured", fit_number=2)
    assert outcome.status == "profiled" and outcome.result == "measured"
    assert (tmp_path / "argv.txt").read_text() == "--lr 0.1 7"
    call = seen[0]
    assert call.arguments["batch_size"] == 16 and call.arguments["epochs"] == 2
    assert call.compile_arguments["optimizer"] == "sgd"
    assert not (tmp_path / "after.txt").exists()
    import keras

    assert "fit" not in keras.Model.__dict__  # Keras's own fit is back


def test_a_script_that_catches_exceptions_around_fit_is_still_stopped(tmp_path):
    script = write(tmp_path, """
        try:
            model.fit(x, y, verbose=0)
        except Exception:
            open("swallowed.txt", "w").write("caught")
    """)
    outcome = run_script(script, [], lambda call: 1)
    assert outcome.result == 1 and not (tmp_path / "swallowed.txt").exists()


def test_the_scripts_own_error_before_fit_is_reported_with_its_traceback(tmp_path):
    script = write(tmp_path, """
        def load():
            raise FileNotFoundError("data/train.csv")
        load()
        model.fit(x, y)
    """)
    outcome = run_script(script, [], lambda call: pytest.fail("no fit expected"))
    assert outcome.status == "failed"
    assert "FileNotFoundError: data/train.csv" in outcome.message
    assert "in load" in outcome.message and "tfopt" not in outcome.message.split("\n")[1]


@pytest.mark.parametrize("body, said", [
    ("print('no training here')", "ended without calling Model.fit"),
    ("for _ in range(3):\n    model.train_on_batch(x, y)", "train_on_batch loops are not covered"),
    ("""
     import tensorflow as tf
     with tf.GradientTape() as tape:
         loss = keras.ops.mean(model(x) ** 2)
     tape.gradient(loss, model.trainable_variables)
     """, "custom training loops are not covered"),
    ("model.fit(x, y, verbose=0)", "called Model.fit 1 time(s), not 2"),
])
def test_a_script_without_the_fit_says_so_and_names_loops_it_does_not_cover(tmp_path, body,
                                                                            said):
    script = write(tmp_path, textwrap.dedent(body))
    outcome = run_script(script, [], lambda call: pytest.fail("no fit expected"), fit_number=2)
    assert outcome.status == "no_fit" and said in outcome.message, outcome.message


def test_a_missing_or_non_python_script_is_refused_by_name(tmp_path):
    with pytest.raises(InvalidArgumentError, match="nope.py: no such script"):
        run_script(tmp_path / "nope.py", [], lambda call: None)
    bad = tmp_path / "bad.py"
    bad.write_text("def (:\n")
    with pytest.raises(InvalidArgumentError, match="bad.py: not a Python script"):
        run_script(bad, [], lambda call: None)
    with pytest.raises(InvalidArgumentError, match="fit=0"):
        run_script(bad, [], lambda call: None, fit_number=0)
