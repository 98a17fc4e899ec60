"""tfopt profile's GPU section: NVML sampled over the timed rounds of a real script's fit. The
NVIDIA driver is what this machine cannot have, so pynvml is the fake one (tfopt.gpu.testing);
the script, its fit and the timing are real."""

import json
import sys
import textwrap

from tfopt.gpu.testing import FakeGpu, make_fake_nvml
from tfopt.profile.profile import profile_script

SCRIPT = textwrap.dedent("""
    import keras
    import numpy as np
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    x = np.random.default_rng(0).random((4096, 16), dtype=np.float32)
    model.fit(x, x[:, :1], batch_size=32, epochs=20, verbose=0)
""")


def profile_with(monkeypatch, tmp_path, gpus):
    monkeypatch.setitem(sys.modules, "pynvml", make_fake_nvml(gpus))
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    report = profile_script(script, steps=20, seconds=2.0)
    assert report.status == "profiled", report.message
    return report


def test_gpm_counters_beside_gpu_util_and_a_hollow_gpu_named(monkeypatch, tmp_path):
    hopper = FakeGpu(name="NVIDIA H100 80GB HBM3", compute_capability=(9, 0), gpu_util=98,
                     gpm={"sm_active": 21, "sm_occupancy": 12, "tensor_active": 3,
                          "dram_bw_util": 9})
    report = profile_with(monkeypatch, tmp_path, [hopper])
    (gpu,) = report.gpu.gpus
    assert gpu["name"] == "NVIDIA H100 80GB HBM3" and gpu["samples"] >= 2
    assert (gpu["gpu_util"], gpu["sm_active"], gpu["tensor_active"]) == (98, 21, 3)
    text = report.describe()
    assert "GPU 0               GPU-Util 98%, SM active 21%, tensor cores 3%" in text
    assert "SM activity 21% says how little of the chip worked" in text
    data = json.loads(report.to_json())
    assert data["gpu"]["gpus"][0]["sm_occupancy"] == 12 and data["gpu"]["unavailable"] is None


def test_a_gpu_without_gpm_shows_gpu_util_alone_and_no_gpu_says_why(monkeypatch, tmp_path):
    ampere = FakeGpu(name="NVIDIA A100-SXM4-40GB", gpu_util=[60, 80])
    report = profile_with(monkeypatch, tmp_path, [ampere])
    (gpu,) = report.gpu.gpus
    assert 60 <= gpu["gpu_util"] <= 80 and gpu["sm_active"] is None
    assert "GPU-Util" in report.describe() and "no GPM counters" in report.describe()
    report = profile_with(monkeypatch, tmp_path, [])
    assert report.gpu.gpus == [] and report.gpu.unavailable
    assert f"GPU counters        - ({report.gpu.unavailable})" in report.describe()


def test_without_pynvml_the_profile_still_reports(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    report = profile_script(script, steps=20, seconds=2.0)
    assert report.status == "profiled" and report.gpu.unavailable
    assert report.examples_per_s > 0
