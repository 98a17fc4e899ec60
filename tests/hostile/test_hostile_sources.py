"""Sources that change under a conversion, met by real ``tfopt convert`` processes: a CSV
rewritten and a NumPy file deleted while the conversion reads them are one ``tfopt: error:``
line each, and nothing is left at the destination: never a dataset mixing two versions that
``verify`` would pass, never a worker's traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

pytestmark = pytest.mark.alone  # caught at a moment: a busy neighbour could let it pass


def convert_while(src, dst, change, *extra):
    process = subprocess.Popen([sys.executable, "-m", "tfopt", "convert", str(src), str(dst),
                                "--workers", "1", "-q", *extra], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if dst.exists() and any(name.endswith(".tfrecord") or ".tmp-" in name
                                for name in os.listdir(dst)):
            change()  # a shard is being written: the source is being read
            break
        time.sleep(0.002)
    out, err = process.communicate(timeout=300)
    return process.returncode, err


def one_error_line(err):
    lines = [line for line in err.splitlines() if line.startswith("tfopt: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    return lines[0]


@pytest.mark.slow
def test_a_csv_rewritten_during_its_conversion_is_refused_and_nothing_is_kept(tmp_path):
    src = tmp_path / "table.csv"
    rows = "\n".join(f"{i},{i * 0.5},{i % 3}" for i in range(300_000))
    src.write_text("a,b,label\n" + rows + "\n")

    def rewrite():  # an export saved again: other values, the same shape
        src.write_text("a,b,label\n" + rows.replace(",0.5,", ",9.5,") + "\n")

    code, err = convert_while(src, tmp_path / "out", rewrite, "--label", "label",
                              "--shard-size", "1MB")
    assert code == 1, err[-3000:]
    assert "the source changed while it was converted" in one_error_line(err)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_numpy_file_deleted_during_its_conversion_is_one_line(tmp_path):
    src = tmp_path / "arrays.npz"
    np.savez(src, x=np.random.default_rng(0).random((200_000, 16), dtype=np.float32),
             y=np.arange(200_000) % 5)
    code, err = convert_while(src, tmp_path / "out", src.unlink, "--label", "y",
                              "--shard-size", "1MB")
    if code == 0:  # the reader held everything before the file went: nothing mixed
        pytest.skip("the conversion had read the whole file before it was deleted")
    assert code == 1, err[-3000:]
    line = one_error_line(err)
    assert "was deleted" in line or "arrays.npz" in line, line
    assert not (tmp_path / "out").exists()
