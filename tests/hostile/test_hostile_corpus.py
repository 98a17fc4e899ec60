"""The hostile corpus (hostile_inputs.py), each case run as a real ``tfopt`` process.

What holds for every case: no traceback, no hang, no death by a signal, an exit code of 0 or 1
(2 for click's usage errors), and a refusal is one ``tfopt: error:`` line that leaves nothing
written. An accepted dataset verifies and reads back through TensorFlow (one process reads them
all, each as soon as its case ends); a damaged one fails verify. The README states how many
inputs the corpus holds, and a test keeps that number true.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hostile_inputs import (
    Case,
    csv_cases,
    damage_cases,
    example_cases,
    good_image_folder,
    gzip_bomb_cases,
    image_cases,
    interrupted_cases,
    name_cases,
    number_cases,
    numpy_cases,
    odd_path_cases,
    record_file_cases,
    source_cases,
    table_cases,
)

# its kill cases catch a convert while a shard's temporary file exists, for milliseconds; a
# test beside it on the other core once let that moment pass (scripts/test.sh runs it alone)
pytestmark = pytest.mark.alone

ROOT = Path(__file__).resolve().parents[2]
HANG_S = 90  # far beyond any case's run on a busy 2-core machine


@dataclass
class Outcome:
    case: Case
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    hung: bool = False
    after: list = field(default_factory=list)  # (argv, returncode, stderr) of follow-ups
    verify_after_kill: tuple | None = None  # (returncode, output) of verify right after a kill
    destination_before: object = None  # the destination's listing before the command


def _env(case: Case) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2", **case.env)
    env.pop("PYTHONSTARTUP", None)
    return env


def _tfopt(argv, env, kill_when=None, dst=None) -> tuple[int, str, str, bool]:
    process = subprocess.Popen([sys.executable, "-m", "tfopt", *argv], env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, start_new_session=True)
    if kill_when is not None:
        # nobody reads the pipes until communicate(): a convert's few lines fit in them
        deadline = time.monotonic() + HANG_S
        while process.poll() is None and time.monotonic() < deadline:
            if kill_when(dst):
                os.killpg(process.pid, signal.SIGKILL)
                break
            time.sleep(0.002)
    try:
        stdout, stderr = process.communicate(timeout=HANG_S)
        return process.returncode, stdout, stderr, False
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        return process.returncode, stdout, stderr, True


def _run(case: Case) -> Outcome:
    env = _env(case)
    started = time.monotonic()
    code, out, err, hung = _tfopt(case.argv, env, case.kill_when, case.dst)
    outcome = Outcome(case, code, out, err, time.monotonic() - started, hung)
    if case.kill_when is not None and case.dst is not None:
        if case.dst.exists():
            verify = _tfopt(["verify", str(case.dst), "-q"], env)
            outcome.verify_after_kill = (verify[0], verify[1] + verify[2])
        for argv in case.then:
            if "--resume" in argv and outcome.returncode == 0:
                continue  # not killed (a failure of its own, below): nothing to resume
            if "--resume" in argv and not _started(case.dst):
                argv = [a for a in argv if a != "--resume"]  # killed before it began
            code, _, err, hung = _tfopt(argv, env)
            outcome.after.append((argv, -9 if hung else code, err))
    return outcome


def _started(dst: Path) -> bool:
    return dst.exists() and any(dst.iterdir())


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, tf):
    import numpy as np

    import tfopt

    root = tmp_path_factory.mktemp("hostile")
    rng = np.random.default_rng(0)
    jpeg = tf.io.encode_jpeg(rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)).numpy()
    png = tf.io.encode_png(rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)).numpy()
    pristine = root / "pristine"
    good = good_image_folder(root / "pristine-src", jpeg, per_class=6)
    tfopt.convert(good, pristine, workers=1, shards=3)
    big = good_image_folder(root / "big-src", jpeg, per_class=150)
    cases = (image_cases(root / "images", jpeg, png) + source_cases(root / "sources", jpeg)
             + numpy_cases(root / "numpy") + csv_cases(root / "csv")
             + table_cases(root / "tables") + odd_path_cases(root / "paths")
             + damage_cases(root / "damaged", pristine)
             + example_cases(root / "examples", pristine) + name_cases(root / "names", jpeg)
             + gzip_bomb_cases(root / "bomb") + number_cases(root / "numbers")
             + record_file_cases(root / "records", pristine)
             + interrupted_cases(root / "killed", big, records=300))
    destinations_before = {c.name: _listing(c.dst) for c in cases if c.dst is not None}
    read_back = ReadBack()

    def run_then_read_back(case: Case) -> Outcome:
        outcome = _run(case)
        read_back.add(outcome)
        return outcome

    try:
        with ThreadPoolExecutor(2) as pool:
            outcomes = {o.case.name: o for o in pool.map(run_then_read_back, cases)}
    except BaseException:  # a case broke the harness: stop the reader, which would wait for input
        read_back.process.kill()
        raise
    for outcome in outcomes.values():
        outcome.destination_before = destinations_before.get(outcome.case.name)
    return outcomes, read_back.results()


def _listing(path: Path | None):
    if path is None or not path.exists():
        return None
    if path.is_file():
        return ("file", path.read_bytes())
    try:
        return sorted(str(p.relative_to(path)) for p in path.rglob("*"))
    except OSError:
        return "unlistable"


_READ_BACK = """
import json, sys
import tfopt
results = {}
for line in sys.stdin:  # one accepted dataset a line, sent as soon as its case has finished
    name, path = json.loads(line)
    try:
        count = 0
        # an image size for image datasets only: PipelineBuilder refuses one for other data
        images = tfopt.read_manifest(path).image_key is not None
        for batch in tfopt.build_pipeline(path, 16, image_size=16 if images else None,
                                          split="train"):
            features = batch[0] if isinstance(batch, tuple) else batch
            first = next(iter(features.values())) if isinstance(features, dict) else features
            count += int(first.shape[0])
        results[name] = ["ok", count]
    except Exception as error:  # the test names the case and shows the error
        results[name] = ["error", f"{type(error).__name__}: {error}"[:400]]
print(json.dumps(results))
"""


class ReadBack:
    """Every accepted dataset read whole through tfopt's TensorFlow pipeline, in one process.

    The process starts before the cases run and reads each dataset as soon as its case has
    finished: its TensorFlow start-up and its reads (one core's work) overlap the cases
    instead of following them.
    """

    def __init__(self):
        # stderr to a file: TensorFlow's warnings must never fill a pipe nobody reads yet
        self.stderr = tempfile.TemporaryFile("w+")
        self.process = subprocess.Popen(
            [sys.executable, "-c", _READ_BACK], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self.stderr, text=True,
            env=dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2"))
        self.lock = threading.Lock()

    def add(self, outcome: Outcome) -> None:
        """Sends the case's dataset if the command accepted it and wrote a manifest."""
        dst = outcome.case.dst
        if (dst is not None and outcome.returncode == 0 and not outcome.hung
                and (dst / "manifest.json").exists()):
            with self.lock:  # the pool's threads share the one pipe: whole lines only
                self.process.stdin.write(json.dumps([outcome.case.name, str(dst)]) + "\n")
                self.process.stdin.flush()

    def results(self) -> dict:
        stdout, _ = self.process.communicate(timeout=600)
        self.stderr.seek(0)
        assert self.process.returncode == 0, self.stderr.read()[-3000:]
        self.stderr.close()
        return json.loads(stdout.strip().splitlines()[-1])


def _error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("tfopt: error:")]


def _problem(outcome: Outcome, read_back) -> str | None:
    """What is wrong with how tfopt met one case, or None."""
    case = outcome.case
    shown = f"exit {outcome.returncode}\n{outcome.stdout[-1500:]}\n{outcome.stderr[-3000:]}"
    if outcome.hung:
        return f"hung past {HANG_S} s: " + shown
    if "Traceback" in outcome.stderr + outcome.stdout:
        return "a traceback: " + shown
    if case.kill_when is not None:
        return _killed_problem(outcome)
    if outcome.returncode not in (0, 1, 2):
        return "an exit code that is not 0, 1 or 2: " + shown
    refused = outcome.returncode != 0
    if case.expect == "reject":
        return None if refused else "a damaged dataset passed verify: " + shown
    if case.expect == "refuse" and not refused:
        return "accepted what it must refuse: " + shown
    if case.expect == "accept" and refused:
        return "refused what it must accept: " + shown
    if refused:
        if outcome.returncode == 1 and len(_error_lines(outcome.stderr)) != 1:
            return "not one 'tfopt: error:' line: " + shown
        if case.dst is not None and _listing(case.dst) != outcome.destination_before:
            return "a refusal left something written: " + shown
        return None
    if case.dst is None:
        return None
    if case.name not in read_back:
        return "accepted, but no manifest was written: " + shown
    status, detail = read_back[case.name]
    if status != "ok":
        return f"accepted, but TensorFlow cannot read it: {detail}\n" + shown
    if case.records is not None and detail != case.records:
        return f"accepted {detail} records, expected {case.records}: " + shown
    return None


def _records_in_manifest(dst: Path) -> int | None:
    try:
        return json.loads((dst / "manifest.json").read_text())["totals"]["num_records"]
    except (OSError, ValueError, KeyError):
        return None


def _killed_problem(outcome: Outcome) -> str | None:
    case = outcome.case
    if outcome.returncode != -signal.SIGKILL:
        # each kill point is a shard's temporary file, there for the shard's whole write
        return f"not killed at its point (exit {outcome.returncode}): the case tested nothing"
    if outcome.verify_after_kill is not None:
        code, text = outcome.verify_after_kill
        if "Traceback" in text:
            return "verify after the kill: a traceback: " + text[-2000:]
        # killed while writing a shard, before the manifest: verify must refuse what is left
        if code != 1:
            return "verify passed an interrupted conversion: " + text[-2000:]
    for argv, code, err in outcome.after:
        if code != 0 or "Traceback" in err:
            return f"{argv}: exit {code}\n{err[-2000:]}"
    records = _records_in_manifest(case.dst)
    if records != case.records:
        return f"finished with {records} records, expected {case.records}"
    return None


def test_every_hostile_input_is_refused_or_usable(corpus):
    outcomes, read_back = corpus
    problems = {name: _problem(o, read_back) for name, o in outcomes.items()}
    failed = {name: problem for name, problem in problems.items() if problem}
    assert not failed, f"{len(failed)} of {len(outcomes)} hostile inputs mishandled:\n\n" + (
        "\n\n".join(f"## {name}\n{problem}" for name, problem in sorted(failed.items())))


def test_readme_states_the_corpus_size(corpus):
    readme = (ROOT / "README.md").read_text()
    stated = re.search(r"(\d+) hostile inputs", readme)
    assert stated, "README.md should say how many hostile inputs the corpus tries"
    assert int(stated.group(1)) == len(corpus[0])
