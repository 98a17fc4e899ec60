"""GpuSnapshot reading: every field, unsupported fields, decoding, several GPUs."""

from __future__ import annotations

import pytest

from tfopt.gpu.nvml import gpu_snapshots
from tfopt.gpu.snapshot import GpuSnapshot, decode_clock_reasons
from tfopt.gpu.testing import FakeGpu, make_fake_nvml

GIB = 1 << 30


def test_reads_every_field():
    gpu = FakeGpu(name="NVIDIA A100-SXM4-40GB", uuid="GPU-abc", compute_capability=(8, 0),
                  gpu_util=97, mem_util=41, memory_total=40 * GIB, memory_used=30 * GIB,
                  power_mw=251_500, power_limit_mw=400_000, temperature=66, sm_clock=1410,
                  mem_clock=1215, clock_reasons=0x1, pstate=0,
                  processes=[(11, 2 * GIB), (12, 1 * GIB)])
    _, (snap,) = gpu_snapshots(make_fake_nvml([gpu]))
    assert (snap.index, snap.name, snap.uuid) == (0, "NVIDIA A100-SXM4-40GB", "GPU-abc")
    assert (snap.gpu_util, snap.mem_util) == (97, 41)
    assert (snap.memory_used, snap.memory_total) == (30 * GIB, 40 * GIB)
    assert (snap.power_w, snap.power_limit_w) == (251.5, 400.0)
    assert (snap.temperature_c, snap.sm_clock_mhz, snap.mem_clock_mhz) == (66, 1410, 1215)
    assert snap.clock_reasons == ("gpu_idle",) and not snap.throttled
    assert snap.pstate == 0 and snap.compute_capability == (8, 0)
    assert [(p.pid, p.used_memory) for p in snap.processes] == [(11, 2 * GIB), (12, GIB)]
    assert snap.error is None and snap.timestamp > 0


@pytest.mark.parametrize(
    "fake_field, snapshot_fields",
    [
        ("gpu_util", ("gpu_util", "mem_util")),
        ("memory_used", ("memory_used", "memory_total")),
        ("power_mw", ("power_w",)),
        ("power_limit_mw", ("power_limit_w",)),
        ("temperature", ("temperature_c",)),
        ("sm_clock", ("sm_clock_mhz",)),
        ("clock_reasons", ("clock_reasons",)),
        ("pstate", ("pstate",)),
        ("processes", ("processes",)),
        ("compute_capability", ("compute_capability",)),
    ],
)
def test_unsupported_field_is_none_and_the_rest_is_read(fake_field, snapshot_fields):
    _, (snap,) = gpu_snapshots(make_fake_nvml([FakeGpu(unsupported=frozenset({fake_field}))]))
    for name in snapshot_fields:
        assert getattr(snap, name) is None, name
    assert snap.name == "NVIDIA A100-SXM4-40GB"
    assert snap.mem_clock_mhz == 1215  # read after the unsupported one, still there


def test_memory_info_v2_preferred_over_v1():
    gpu = FakeGpu(memory_used=10 * GIB, memory_reserved=512 << 20)
    _, (new,) = gpu_snapshots(make_fake_nvml([gpu], new_api=True))
    _, (old,) = gpu_snapshots(make_fake_nvml([gpu], new_api=False))
    assert new.memory_used == 10 * GIB  # v2: reserved memory not counted as used
    assert old.memory_used == 10 * GIB + (512 << 20)  # v1 fallback


def test_memory_v2_missing_in_driver_falls_back_to_v1():
    # A driver without nvmlDeviceGetMemoryInfo_v2: pynvml raises FunctionNotFound only for the
    # call with version=, so wrap the fake's function to do the same.
    fake = make_fake_nvml([FakeGpu(memory_used=GIB, memory_reserved=0)])
    original = fake.nvmlDeviceGetMemoryInfo

    def memory(handle, version=None):
        if version is not None:
            raise fake.NVMLError(13)
        return original(handle)

    fake.nvmlDeviceGetMemoryInfo = memory
    _, (snap,) = gpu_snapshots(fake)
    assert snap.memory_used == GIB


def test_unknown_pstate_and_unavailable_process_memory_are_none():
    gpu = FakeGpu(pstate=32, processes=[(7, (1 << 64) - 1)])
    _, (snap,) = gpu_snapshots(make_fake_nvml([gpu]))
    assert snap.pstate is None
    assert snap.processes[0].used_memory is None


def test_several_gpus_and_a_lost_one():
    gpus = [FakeGpu(name="A", compute_capability=(8, 0)), FakeGpu(name="B", lost=True),
            FakeGpu(name="C", compute_capability=(7, 5), gpu_util=3)]
    state, snaps = gpu_snapshots(make_fake_nvml(gpus))
    assert state.device_count == 3 and [s.index for s in snaps] == [0, 1, 2]
    assert snaps[0].name == "A" and snaps[2].compute_capability == (7, 5)
    assert snaps[1].error and snaps[1].name is None and snaps[1].gpu_util is None
    assert snaps[2].is_low_util(50) and not snaps[0].is_low_util(50)


def test_decode_clock_reasons():
    assert decode_clock_reasons(None) is None
    assert decode_clock_reasons(0) == ()
    assert decode_clock_reasons(0x4 | 0x40) == ("sw_power_cap", "hw_thermal")
    assert decode_clock_reasons(0x1000 | 0x8) == ("hw_slowdown", "unknown_0x1000")


@pytest.mark.parametrize(
    "reasons, throttled",
    [
        ((), False),
        (("gpu_idle",), False),
        (("applications_clocks", "sync_boost", "display_clocks"), False),
        (("sw_power_cap",), True),
        (("gpu_idle", "hw_power_brake"), True),
        (None, False),
    ],
)
def test_throttled_means_power_or_heat(reasons, throttled):
    snap = GpuSnapshot(index=0, timestamp=0.0, clock_reasons=reasons)
    assert snap.throttled is throttled


def test_low_util_threshold():
    assert GpuSnapshot(0, 0.0, gpu_util=49).is_low_util(50)
    assert not GpuSnapshot(0, 0.0, gpu_util=50).is_low_util(50)
    assert not GpuSnapshot(0, 0.0, gpu_util=None).is_low_util(50)
    assert GpuSnapshot(0, 0.0, gpu_util=79).is_low_util(80)
