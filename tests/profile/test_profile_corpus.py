"""tfopt profile on the planted-flaw corpus (examples/profile_corpus/), at small size, through
the real command: each script's planted flaw named first, the well-tuned one told nothing."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[2] / "examples" / "profile_corpus"

# script, examples it makes, the kind named first (None: nothing worth changing), a word the
# first recommendation must hold
PLANTED = [
    ("py_function_decode.py", 2048, "input_pipeline", "waits for input"),
    ("text_vectorization_in_model.py", 4096, "xla", "text_vectorization"),
    ("tiny_model_one_step_per_call.py", 65536, "steps_per_execution", "call from Python"),
    ("sequential_map_no_prefetch.py", 2048, "input_pipeline", "waits for input"),
    ("unbatched_map.py", 100000, "input_pipeline", "waits for input"),
    ("cache_after_augmentation.py", 2048, "cache_after_random", "random"),
    ("float32_convnet.py", 1024, "precision", "float32"),  # where this machine has bf16
    ("well_tuned.py", 2048, None, None),
]


def profile(*args, cwd):
    return subprocess.run([sys.executable, "-m", "tfopt", "profile", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.alone
@pytest.mark.parametrize("script, examples, first, word", PLANTED)
def test_the_planted_flaw_is_named_first(tmp_path, script, examples, first, word):
    # what is named first rests on rates timed for seconds on 2 shared cores: a miss is
    # measured once more, and two misses fail, with the figures that ranked the changes
    for attempt in (1, 2):
        report = _profiled(tmp_path / f"attempt-{attempt}", script, examples)
        found = report["recommendations"]
        expected = first
        if expected == "precision" and report["model"]["machine_policy"]["policy"] == "float32":
            expected = None  # no faster half type here: the script is well tuned here
        named = (found == [] if expected is None else
                 bool(found) and found[0]["kind"] == expected and word in found[0]["message"])
        if named:
            break
    assert named, (found, {key: report[key] for key in (
        "examples_per_s", "step_examples_per_s", "input_examples_per_s", "input_bound_share",
        "notes")})
    assert all(set(r) >= {"kind", "message", "expected_speedup"} for r in found)


def _profiled(folder, script, examples) -> dict:
    folder.mkdir()
    done = profile("--json", "--seconds", "6", str(CORPUS / script), str(examples), cwd=folder)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)  # stdout holds the report only: the script's output
    assert report["status"] == "profiled"
    assert report["profile_seconds"] < 60  # from the fit caught to the report
    assert report["examples_per_s"] > 0 and 0 <= report["input_bound_share"] < 1
    assert not list(folder.iterdir())  # stopped before the script saved anything
    return report


def test_a_script_failing_before_fit_exits_1_with_its_own_error(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text("import keras\nraise RuntimeError('no GPU quota left')\n")
    done = profile("--json", str(script), cwd=tmp_path)
    assert done.returncode == 1
    assert json.loads(done.stdout)["status"] == "failed"
    assert "RuntimeError: no GPU quota left" in done.stderr
    done = profile(str(tmp_path / "missing.py"), cwd=tmp_path)
    assert done.returncode != 0 and "missing.py" in done.stderr


@pytest.mark.slow
@pytest.mark.alone
def test_try_measures_the_changes_and_recommends_only_those_that_measured_faster(tmp_path):
    script = CORPUS / "tiny_model_one_step_per_call.py"
    done = profile("--json", "--try", "--seconds", "6", str(script), "32768", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["tried"] is True
    tried = {trial["kind"]: trial for trial in report["trials"]}
    assert set(tried) >= {"xla", "steps_per_execution"}  # and precision on a bf16 CPU
    assert tried["steps_per_execution"]["same_training"] is True
    found = report["recommendations"]
    assert found and found[0]["kind"] == "steps_per_execution"
    assert found[0]["measured_speedup"] >= 1.2, found  # the planted flaw costs that much
    for change in found:
        assert change.get("measured_speedup", 9.9) >= 1.05 and change.get("same_training",
                                                                           True)
    # the changes that paid, measured together on the whole fit (where two or more paid)
    paid = [kind for kind, trial in tried.items() if kind != "together"
            and (trial["measured_speedup"] or 0) >= 1.05 and trial["same_training"]]
    assert ("together" in tried) == (len(paid) >= 2), tried
    if "together" in tried:
        together = tried["together"]
        assert sorted(together["parts"]) == sorted(paid) and together["same_training"]
        assert together["change"]["steps_per_execution"] == 16
        assert together["measured_speedup"] > 1.05, together
