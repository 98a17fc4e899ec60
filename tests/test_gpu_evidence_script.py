"""scripts/gpu_evidence.sh: the one prepared call that records monitor and doctor on a GPU.

It runs here for real, where there is no NVIDIA driver: doctor must still write its report, and
monitor must fail with its one-line NVML message and exit code 1. On a machine with a GPU the
same test checks the samples instead.
"""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_evidence.sh"


def test_gpu_evidence_script_records_doctor_and_monitor(tmp_path):
    out = tmp_path / "evidence"
    done = subprocess.run(["bash", str(SCRIPT), str(out)], capture_output=True, text=True,
                          timeout=120, env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable})
    assert done.returncode == 0, done.stderr

    codes = dict(line.split() for line in (out / "exit-codes.txt").read_text().splitlines())
    assert codes["doctor-json"] == "0" and codes["doctor"] == "0"
    report = json.loads((out / "doctor.json").read_text())
    names = {check["name"] for check in report["checks"]}
    assert {"Python", "TensorFlow", "Keras"} <= names
    assert "Python" in (out / "doctor.txt").read_text()

    if codes["monitor"] == "0":  # a machine with a GPU: three samples per GPU, one per line
        rows = [json.loads(line) for line in (out / "monitor.jsonl").read_text().splitlines()]
        assert rows and len(rows) % 3 == 0
    else:
        assert codes["monitor"] == "1"
        assert "NVML" in (out / "monitor.txt").read_text()
        assert not (out / "monitor.jsonl").exists()
