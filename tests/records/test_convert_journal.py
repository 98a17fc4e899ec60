"""The journal of convert (records/convert/journal.py): --resume after a real kill -9 of a
converting process, a damaged journaled shard written again, other options refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import feature_values, read_examples

import tfopt
from tfopt.errors import DatasetError, OutputExistsError
from tfopt.records.convert.options import ConvertOptions
from tfopt.records.manifest import JOURNAL_NAME, MANIFEST_NAME


def _children(pid: int) -> list[int]:
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            children.append(int(stat.parent.name))
    return children


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _names(dataset, split):
    return sorted(feature_values(e, "image/filename")[0] for e in read_examples(dataset, split))


@pytest.mark.slow
def test_resume_after_kill_9_gives_the_records_of_an_uninterrupted_run(tmp_path):
    src = tmp_path / "images"
    tfopt.make_demo_data(src, count=1500, classes=5, min_size=48, max_size=64, workers=1)
    args = ["--shards", "30", "--seed", "7", "--val-fraction", "0.1", "--workers", "2", "-q"]
    out = tmp_path / "killed"
    process = subprocess.Popen([sys.executable, "-m", "tfopt", "convert", str(src), str(out), *args])
    journal = out / JOURNAL_NAME
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if journal.exists() and journal.read_text().count("\n") >= 4:  # header + 3 shards
            break
        assert process.poll() is None, "the conversion ended before it could be killed"
        time.sleep(0.005)
    workers = _children(process.pid)
    assert workers, "the conversion had no worker processes"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert not (out / MANIFEST_NAME).exists(), "killed too late: the conversion had finished"
    # orphaned workers notice and exit instead of lingering with TensorFlow in memory
    deadline = time.monotonic() + 20
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in workers if _alive(pid)], "orphaned workers still running"

    # without --resume the folder is refused, and every command calls it incomplete
    with pytest.raises(OutputExistsError, match="--resume"):
        tfopt.convert(src, out, workers=1)
    with pytest.raises(DatasetError, match="incomplete dataset"):
        tfopt.read_manifest(out)
    incomplete = tfopt.verify(out)
    assert not incomplete.ok and incomplete.problems[0].kind.value == "incomplete"

    resumed = subprocess.run(
        [sys.executable, "-m", "tfopt", "convert", str(src), str(out), *args, "--resume", "--json"],
        capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert '"resumed_shards": ' in resumed.stdout
    resumed_shards = int(resumed.stdout.split('"resumed_shards": ')[1].split(",")[0])
    assert resumed_shards >= 3

    reference = tfopt.convert(src, tmp_path / "reference", seed=7, val_fraction=0.1, shards=30,
                              workers=1)
    for split in ("train", "validation"):
        assert _names(out, split) == _names(tmp_path / "reference", split)
    resumed_manifest = tfopt.read_manifest(out)
    assert [s.sha256 for s in resumed_manifest.shards] == [s.sha256 for s in reference.manifest.shards]
    assert tfopt.verify(out).ok
    assert not journal.exists()
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary files left


def test_resume_redoes_a_journaled_shard_whose_file_was_damaged(image_folder, tmp_path):
    out = tmp_path / "out"
    options = dict(workers=1, shards=3, seed=1)
    tfopt.convert(image_folder, out, **options)
    # turn the finished dataset back into an interrupted one: journal, no manifest
    manifest = tfopt.read_manifest(out)
    (out / MANIFEST_NAME).unlink()
    from tfopt.records.convert.plan import plan_fingerprint, plan_shards
    from tfopt.records.sources import SourceKind, scan_source
    from tfopt.records.writer import ShardResult

    opts = ConvertOptions(**options)
    scanned = scan_source(image_folder, SourceKind.IMAGES, label=None, skip_bad=False)
    fingerprint = plan_fingerprint(scanned, opts, plan_shards(scanned, opts))
    lines = [f'{{"journal": 1, "fingerprint": "{fingerprint}"}}']
    for shard in manifest.shards:
        lines.append(json.dumps(ShardResult(shard.file, "train", shard.num_records, shard.num_bytes,
                                            shard.sha256, [], {}).to_json()))
    (out / JOURNAL_NAME).write_text("\n".join(lines) + "\n")
    damaged = out / manifest.shards[1].file
    damaged.write_bytes(b"garbage")
    result = tfopt.convert(image_folder, out, resume=True, **options)
    assert result.resumed_shards == 2
    assert tfopt.read_manifest(out).shards[1].sha256 == manifest.shards[1].sha256
    assert tfopt.verify(out).ok


def test_resume_refuses_other_options(image_folder, tmp_path):
    out = tmp_path / "out"
    tfopt.convert(image_folder, out, workers=1, shards=2)
    (out / MANIFEST_NAME).unlink()
    (out / JOURNAL_NAME).write_text('{"journal": 1, "fingerprint": "other"}\n')
    with pytest.raises(DatasetError, match="another source or other options"):
        tfopt.convert(image_folder, out, workers=1, shards=2, resume=True)
