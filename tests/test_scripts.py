"""The measurement scripts under scripts/ run as their docstrings say (real processes, small
data); what they measure is theirs to print, not asserted here."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import encode_jpeg, random_pixels

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def test_bench_decode_times_every_variant_and_prints_both_ceilings(tmp_path):
    folder = tmp_path / "photos" / "cat"
    folder.mkdir(parents=True)
    for index in range(3):  # 600 px on the shorter side: tfopt's cache keeps it at 1/2 scale
        (folder / f"{index}.JPG").write_bytes(encode_jpeg(random_pixels(index, 600, 800)))
    (folder / "notes.txt").write_text("not an image")
    done = subprocess.run([sys.executable, str(SCRIPTS / "bench_decode.py"), str(tmp_path),
                           "--count", "2", "--rounds", "1"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 JPEGs of" in done.stdout and "1 rounds, one core" in done.stdout
    for variant in ("keras", "full", "1/8", "tfopt"):
        assert re.search(rf"^\s+{re.escape(variant)}: +[\d.]+ ms CPU an image", done.stdout,
                         re.MULTILINE), done.stdout
    assert re.search(r"^keras / tfopt: [\d.]+x", done.stdout, re.MULTILINE), done.stdout
    assert re.search(r"^keras / 1/8: +[\d.]+x", done.stdout, re.MULTILINE), done.stdout


def test_bench_decode_names_a_folder_without_jpegs(tmp_path):
    (tmp_path / "notes.txt").write_text("not an image")
    done = subprocess.run([sys.executable, str(SCRIPTS / "bench_decode.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == f"{tmp_path}: no .jpg or .jpeg files found"


def test_bench_one_epoch_times_the_three_fits_and_prints_their_ratios(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPTS / "bench_one_epoch.py"), "--work",
                           str(tmp_path), "--count", "40", "--rounds", "1"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for name in ("Run (cache auto)", "Run (cache=True)", "guide + model.fit"):
        assert re.search(rf"^  {re.escape(name)} +[\d.]+ s +[\d.]+x the guide", done.stdout,
                         re.MULTILINE), done.stdout
    assert re.search(r"^cache auto / cache=True: [\d.]+x", done.stdout, re.MULTILINE)


def test_bench_preemption_stops_tfopt_at_a_step_and_keras_at_once(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPTS / "bench_preemption.py"), "--repeats",
                           "1"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    arms = {line["arm"]: line for line in map(json.loads, done.stdout.splitlines())}
    assert arms["tfopt"]["statuses"] == [75] and arms["tfopt"]["steps_kept"][0] > 0
    assert arms["keras"]["statuses"] == [-15] and arms["keras"]["steps_kept"] == [0]
    assert 0 < arms["tfopt"]["median_s"] < 30  # the grace period the docs ask for


def test_bench_worker_agreement_times_both_arms_and_prints_their_ratio():
    done = subprocess.run([sys.executable, str(SCRIPTS / "bench_worker_agreement.py"),
                           "--repeats", "1", "--steps", "6"], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    *arms, ratio = map(json.loads, done.stdout.splitlines())
    assert [arm["preemption"] for arm in arms] == [True, False]
    assert all(arm["epochs_timed"] == 2 and arm["ms_per_step_median"] > 0 for arm in arms)
    assert ratio["step_time_ratio_on_over_off"] == pytest.approx(
        arms[0]["ms_per_step_median"] / arms[1]["ms_per_step_median"], rel=0.01)
