"""NVML access: the real no-driver path of this machine and every state through a fake NVML."""

from __future__ import annotations

import ctypes.util
import importlib.util
import sys

import pytest

from tfopt.errors import GpuUnavailableError
from tfopt.gpu.nvml import (
    NvmlSession,
    NvmlStatus,
    format_cuda_version,
    gpu_snapshots,
    nvml_state,
)
from tfopt.gpu.testing import FakeGpu, make_fake_nvml

REAL_STATE = nvml_state()


@pytest.mark.skipif(REAL_STATE.ok, reason="this machine has a usable NVIDIA GPU")
def test_real_machine_without_driver_reports_state_without_raising():
    state = nvml_state()
    assert not state.ok
    assert state.status in (
        NvmlStatus.LIBRARY_MISSING,
        NvmlStatus.DRIVER_NOT_LOADED,
        NvmlStatus.NO_GPUS,
        NvmlStatus.PYNVML_MISSING,
    )
    if importlib.util.find_spec("pynvml") and ctypes.util.find_library("nvidia-ml") is None:
        assert state.status is NvmlStatus.LIBRARY_MISSING
        assert "libnvidia-ml.so.1" in state.message
    assert state.hint and state.device_count == 0 and state.driver_version is None
    assert gpu_snapshots() == (state, [])
    with pytest.raises(GpuUnavailableError, match="Hint: "):
        state.raise_unless_ok()


def test_missing_pynvml_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    state = nvml_state()
    assert state.status is NvmlStatus.PYNVML_MISSING
    assert "nvidia-ml-py" in state.hint
    assert gpu_snapshots() == (state, [])


@pytest.mark.parametrize(
    "code, status, words",
    [
        (12, NvmlStatus.LIBRARY_MISSING, "libnvidia-ml.so.1"),
        (9, NvmlStatus.DRIVER_NOT_LOADED, "not loaded"),
        (18, NvmlStatus.VERSION_MISMATCH, "version mismatch"),
        (4, NvmlStatus.NO_PERMISSION, "permission"),
        (999, NvmlStatus.ERROR, "NVML failed"),
    ],
)
def test_init_errors_become_distinct_states(code, status, words):
    fake = make_fake_nvml([FakeGpu()], init_error=code)
    with NvmlSession(fake) as session:
        assert session.state.status is status
        assert words in session.state.message
        assert session.snapshots() == []
        assert session.handle(0) is None
    assert fake.init_count == 0
    assert "nvmlShutdown" not in fake.calls  # never initialised, so never shut down


def test_version_mismatch_hint_says_reboot():
    state = nvml_state(make_fake_nvml([FakeGpu()], init_error=18))
    assert "reboot" in state.hint
    with pytest.raises(GpuUnavailableError, match="version mismatch"):
        state.raise_unless_ok()


def test_driver_without_gpus():
    state = nvml_state(make_fake_nvml([], driver_version="535.104.05", cuda_version=12020))
    assert state.status is NvmlStatus.NO_GPUS
    assert state.driver_version == "535.104.05"
    assert state.cuda_driver_version_str == "12.2"


def test_ok_state_reports_driver_and_closes_nvml():
    fake = make_fake_nvml([FakeGpu(), FakeGpu()], driver_version="550.54.15", cuda_version=12040)
    session = NvmlSession(fake)
    assert fake.calls == []  # lazy: nothing happens before the state is asked for
    state = session.state
    assert state.ok and state.device_count == 2 and "2 GPUs" in state.message
    assert state.to_dict()["cuda_driver_version"] == "12.4"
    assert state.to_dict()["status"] == "ok"
    assert fake.init_count == 1
    session.close()
    session.close()  # twice is fine
    assert fake.init_count == 0


def test_sys_modules_hook_is_used(monkeypatch):
    fake = make_fake_nvml([FakeGpu(name="NVIDIA H100 80GB HBM3")])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    state, snapshots = gpu_snapshots()
    assert state.ok and snapshots[0].name == "NVIDIA H100 80GB HBM3"
    assert fake.init_count == 0


def test_newer_names_are_called_first():
    fake = make_fake_nvml([FakeGpu()], new_api=True)
    gpu_snapshots(fake)
    assert "nvmlSystemGetCudaDriverVersion_v2" in fake.calls
    assert "nvmlSystemGetCudaDriverVersion" not in fake.calls
    assert "nvmlDeviceGetCurrentClocksEventReasons" in fake.calls
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" not in fake.calls
    assert "nvmlDeviceGetComputeRunningProcesses_v3" in fake.calls
    assert "nvmlDeviceGetEnforcedPowerLimit" in fake.calls
    assert "nvmlDeviceGetPerformanceState" in fake.calls


def test_old_pynvml_without_new_names_uses_fallbacks():
    fake = make_fake_nvml([FakeGpu(clock_reasons=0x4, pstate=2)], new_api=False,
                          cuda_version=11040)
    state, (snap,) = gpu_snapshots(fake)
    assert state.cuda_driver_version_str == "11.4"
    assert snap.clock_reasons == ("sw_power_cap",)
    assert snap.pstate == 2
    assert snap.power_limit_w == 400.0
    assert snap.processes is not None and snap.processes[0].pid == 4242
    for old in ("nvmlDeviceGetCurrentClocksThrottleReasons", "nvmlDeviceGetPowerState",
                "nvmlDeviceGetPowerManagementLimit", "nvmlDeviceGetComputeRunningProcesses",
                "nvmlSystemGetCudaDriverVersion"):
        assert old in fake.calls


def test_new_pynvml_on_old_driver_falls_back_on_function_not_found():
    lacking = {
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetPerformanceState",
        "nvmlSystemGetCudaDriverVersion_v2",
    }
    fake = make_fake_nvml([FakeGpu(clock_reasons=0x40, pstate=8)], driver_lacks=lacking)
    state, (snap,) = gpu_snapshots(fake)
    assert state.cuda_driver_version == 12040
    assert snap.clock_reasons == ("hw_thermal",) and snap.pstate == 8
    assert snap.processes[0].pid == 4242
    assert "nvmlDeviceGetComputeRunningProcesses_v2" in fake.calls
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" in fake.calls


def test_call_returns_none_when_no_name_exists():
    with NvmlSession(make_fake_nvml([FakeGpu()])) as session:
        assert session.call(("nvmlDeviceGetNoSuchThing", "nvmlAlsoMissing")) is None
        assert session.call("nvmlDeviceGetCount") == 1


def test_bytes_from_old_pynvml_are_decoded():
    state, (snap,) = gpu_snapshots(make_fake_nvml([FakeGpu(name="Tesla T4")],
                                                  bytes_strings=True))
    assert state.driver_version == "550.54.15"
    assert snap.name == "Tesla T4" and snap.uuid == "GPU-fake-0000"


def test_format_cuda_version():
    assert format_cuda_version(12040) == "12.4"
    assert format_cuda_version(11080) == "11.8"
    assert format_cuda_version(13000) == "13.0"
    assert format_cuda_version(None) is None
