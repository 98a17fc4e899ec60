"""Hardware probes: CPU flags, GPUs through a fake NVML, TensorFlow real, absent and broken."""

from __future__ import annotations

import importlib.machinery
import json
import subprocess
import sys
import types

import pytest

from tfopt.gpu.hardware import cpu_features, gather_facts, nvidia_gpus, tensorflow_info
from tfopt.gpu.nvml import NvmlStatus
from tfopt.gpu.testing import FakeGpu, make_fake_nvml

SAPPHIRE_RAPIDS = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse2 avx2 fma avx512f avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8

processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu
"""


def write(tmp_path, text):
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    return str(path)


def test_cpu_features_amx(tmp_path):
    cpu = cpu_features(write(tmp_path, SAPPHIRE_RAPIDS))
    assert cpu.model == "Intel(R) Xeon(R) Platinum 8480+"
    assert cpu.avx512f and cpu.avx512_bf16 and cpu.amx_bf16 and cpu.bf16_pays_off
    assert "amx_int8" in cpu.flags  # first CPU's flags, not the second's
    assert cpu.to_dict()["flags"] == sorted(
        ["avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile"])


def test_cpu_features_avx512_without_bf16(tmp_path):
    cpu = cpu_features(write(tmp_path, "model name : Xeon Gold 6148\nflags : avx2 avx512f\n"))
    assert cpu.avx512f and not cpu.avx512_bf16 and not cpu.amx_bf16 and not cpu.bf16_pays_off


def test_cpu_features_amx_bf16_needs_amx_tile(tmp_path):
    assert not cpu_features(write(tmp_path, "flags : amx_bf16\n")).amx_bf16


def test_cpu_features_arm_and_missing_file(tmp_path):
    arm = cpu_features(write(tmp_path, "Features : fp asimd bf16 sve\n"))
    assert "sve" in arm.flags and arm.model is None and not arm.avx512f
    missing = cpu_features(str(tmp_path / "absent"))
    assert missing.flags == frozenset() and missing.model is None


def test_real_cpuinfo_is_read():
    cpu = cpu_features()
    if sys.platform.startswith("linux"):
        assert cpu.flags  # every Linux /proc/cpuinfo lists flags or Features
    assert cpu.machine


def test_nvidia_gpus_through_fake():
    fake = make_fake_nvml([FakeGpu(name="A", compute_capability=(8, 0)),
                           FakeGpu(name="B", compute_capability=(7, 0))])
    state, gpus = nvidia_gpus(fake)
    assert state.ok
    assert [(g.index, g.name, g.compute_capability) for g in gpus] == [(0, "A", (8, 0)),
                                                                     (1, "B", (7, 0))]
    assert gpus[0].to_dict()["compute_capability"] == "8.0"
    assert gpus[0].to_dict()["memory_total_mib"] == 40 * 1024


def test_tensorflow_absent(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # find_spec -> None, import fails
    info = tensorflow_info()
    assert not info.installed and not info.importable and info.version is None
    assert info.keras_version  # keras is installed in this environment


def test_tensorflow_broken(monkeypatch):
    broken = types.ModuleType("tensorflow")  # no sysconfig: reading the build fails
    broken.__spec__ = importlib.machinery.ModuleSpec("tensorflow", None)
    monkeypatch.setitem(sys.modules, "tensorflow", broken)
    info = tensorflow_info()
    assert info.installed and not info.importable
    assert "AttributeError" in info.error


def test_tensorflow_real():
    info = tensorflow_info()
    assert info.installed and info.importable and info.error is None
    assert info.version.startswith("2.")
    assert isinstance(info.is_cuda_build, bool)
    if info.is_cuda_build:
        assert info.cuda_version and info.compute_capabilities
    assert info.visible_gpus is not None and info.visible_gpus >= 0
    assert len(info.memory_growth) == info.visible_gpus


def test_gather_facts_without_tensorflow(monkeypatch, tmp_path):
    monkeypatch.setenv("TF_FORCE_GPU_ALLOW_GROWTH", "true")
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    fake = make_fake_nvml([FakeGpu()], init_error=18)
    facts = gather_facts(tensorflow=False, module=fake,
                         cpuinfo_path=write(tmp_path, SAPPHIRE_RAPIDS))
    assert facts.tensorflow is None and facts.gpus == ()
    assert facts.nvml.status is NvmlStatus.VERSION_MISMATCH
    assert facts.env["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    assert "TF_ENABLE_ONEDNN_OPTS" not in facts.env
    assert facts.cpu.amx_bf16
    data = json.loads(json.dumps(facts.to_dict()))
    assert data["nvml"]["status"] == "version_mismatch" and data["tensorflow"] is None


@pytest.mark.parametrize("module_name", ["tfopt.gpu", "tfopt.gpu.doctor", "tfopt.gpu.hardware"])
def test_gpu_package_imports_without_tensorflow(module_name):
    code = (f"import sys; sys.modules['tensorflow'] = None; import {module_name}; "
            "import tfopt.gpu.testing; print('ok')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
