"""scripts/gpu_evidence.sh: the one prepared call that records monitor, doctor and GPM on a GPU.

It runs here for real, where there is no NVIDIA driver: doctor must still write its report,
monitor must fail with its one-line NVML message and exit code 1, and the GPM read must write
gpm.json saying NVML is not usable, with exit code 1. On a machine with a GPU the same test
checks the samples and each GPU's GPM verdict instead.
"""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_evidence.sh"


def test_gpu_evidence_script_records_doctor_monitor_and_gpm(tmp_path):
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

    gpm = json.loads((out / "gpm.json").read_text())
    assert isinstance(gpm["euid"], int)  # root or not: what the GPM verdict holds for
    if codes["gpm"] == "0":  # NVML works: every GPU has a verdict, and a supported one a read
        assert gpm["gpus"] and all("supported" in gpu for gpu in gpm["gpus"])
        for gpu in (gpu for gpu in gpm["gpus"] if gpu["supported"]):
            assert "read" in gpu and ("metrics" in gpu or "read_error" in gpu)
    else:
        assert codes["gpm"] == "1" and codes["monitor"] == "1"
        assert "NVML not usable" in gpm["error"] and gpm["gpus"] == []
