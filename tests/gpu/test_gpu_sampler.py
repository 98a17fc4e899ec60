"""Sampling: schedule math with a fake clock, statistics, and the thread with a fake NVML."""

from __future__ import annotations

import time

import pytest

from tfopt.errors import InvalidArgumentError
from tfopt.gpu.sampler import GpuSampler, GpuStats, SampleSchedule
from tfopt.gpu.snapshot import GpuSnapshot
from tfopt.gpu.testing import FakeGpu, make_fake_nvml


class FakeClock:
    def __init__(self, now=100.0):
        self.now = now

    def __call__(self):
        return self.now


def test_schedule_first_sample_is_due_at_once_then_every_interval():
    clock = FakeClock()
    schedule = SampleSchedule(2.0, clock)
    assert schedule.delay() == 0.0
    clock.now += 0.5  # the sample took 0.5 s
    schedule.advance()
    assert schedule.delay() == pytest.approx(1.5)
    clock.now += 1.5
    assert schedule.delay() == 0.0
    clock.now += 0.25
    schedule.advance()
    # on the grid 100, 102, 104: no drift from the 0.25 s the sample took
    assert schedule.delay() == pytest.approx(1.75)
    assert schedule.missed == 0


def test_schedule_skips_missed_slots():
    clock = FakeClock(0.0)
    schedule = SampleSchedule(1.0, clock)
    clock.now = 3.5  # the first sample took 3.5 s: slots 1, 2 and 3 are gone
    schedule.advance()
    assert schedule.missed == 3
    assert schedule.delay() == pytest.approx(0.5)  # next slot at 4.0


@pytest.mark.parametrize("interval", [0, -1, float("nan"), float("inf"), "1", True])
def test_schedule_rejects_bad_interval(interval):
    with pytest.raises(InvalidArgumentError, match="interval_s"):
        SampleSchedule(interval)


def test_stats_mean_max_and_missing_fields():
    stats = GpuStats()
    stats.add([GpuSnapshot(0, 0.0, gpu_util=20, power_w=100.0, clock_reasons=("sw_power_cap",)),
               GpuSnapshot(1, 0.0, gpu_util=90)])
    stats.add([GpuSnapshot(0, 1.0, gpu_util=80, power_w=None),
               GpuSnapshot(1, 1.0, gpu_util=70)])
    summary = stats.summary()
    assert summary[0]["gpu_util"].mean == 50.0 and summary[0]["gpu_util"].max == 80
    assert summary[0]["power_w"].count == 1 and summary[0]["power_w"].mean == 100.0
    assert summary[1]["gpu_util"].mean == 80.0 and summary[1]["gpu_util"].max == 90
    assert "temperature_c" not in summary[0]
    assert stats.sample_count(0) == 2 and stats.sample_count(5) == 0
    assert stats.throttled_fraction(0) == 0.5 and stats.throttled_fraction(1) == 0.0
    assert stats.throttled_fraction(5) == 0.0


def test_sampler_sample_once_without_thread():
    fake = make_fake_nvml([FakeGpu(gpu_util=[20, 80]), FakeGpu(gpu_util=5)])
    seen = []
    sampler = GpuSampler(interval_s=1.0, module=fake, on_sample=seen.append)
    sampler.sample_once()
    sampler.sample_once()
    summary = sampler.stats.summary()
    assert summary[0]["gpu_util"].mean == 50.0 and summary[0]["gpu_util"].max == 80
    assert summary[1]["gpu_util"].max == 5
    assert len(seen) == 2 and len(sampler.latest) == 2
    sampler.stop()
    assert fake.init_count == 0


def test_sampler_thread_samples_and_stops():
    fake = make_fake_nvml([FakeGpu(gpu_util=[10, 30])])
    with GpuSampler(interval_s=0.01, module=fake) as sampler:
        assert sampler.state.ok
        deadline = time.monotonic() + 10
        while sampler.stats.sample_count(0) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
    count = sampler.stats.sample_count(0)
    assert count >= 4
    assert sampler.stats.summary()[0]["gpu_util"].max == 30
    assert fake.init_count == 0  # NVML shut down on exit
    time.sleep(0.05)
    assert sampler.stats.sample_count(0) == count  # nothing samples after stop


def test_sampler_without_nvml_is_a_quiet_no_op():
    fake = make_fake_nvml([FakeGpu()], init_error=9)
    with GpuSampler(interval_s=0.01, module=fake) as sampler:
        time.sleep(0.03)
    assert not sampler.state.ok
    assert sampler.stats.summary() == {} and sampler.missed == 0


def test_sampler_thread_stops_and_logs_when_sampling_fails(caplog):
    def broken(snapshots):
        raise RuntimeError("callback bug")

    fake = make_fake_nvml([FakeGpu()])
    with caplog.at_level("ERROR", logger="tfopt"):
        with GpuSampler(interval_s=0.01, module=fake, on_sample=broken) as sampler:
            deadline = time.monotonic() + 10
            while sampler._thread.is_alive() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert not sampler._thread.is_alive()  # the thread ended, the caller did not crash
    assert "GPU sampling failed" in caplog.text
    assert sampler.stats.sample_count(0) == 1


def test_sampler_averages_the_gpm_counters_and_leaves_them_out_where_there_is_no_gpm():
    fake = make_fake_nvml([
        FakeGpu(name="NVIDIA H100 80GB HBM3", compute_capability=(9, 0),
                gpm={"sm_active": [40.0, 60.0], "sm_occupancy": 20.0, "tensor_active": 10.0,
                     "dram_bw_util": 5.0}),
        FakeGpu(name="NVIDIA A100-SXM4-40GB"),
    ])
    sampler = GpuSampler(interval_s=1.0, module=fake)
    for _ in range(3):  # the first sample starts the GPM interval; two readings follow
        sampler.sample_once()
        time.sleep(0.11)  # NVML's GPM samples must be more than 100 ms apart
    summary = sampler.stats.summary()
    assert summary[0]["sm_active"].mean == 50.0 and summary[0]["sm_active"].count == 2
    assert summary[0]["tensor_active"].max == 10.0 and summary[0]["dram_bw_util"].mean == 5.0
    assert "sm_active" not in summary[1] and summary[1]["gpu_util"].count == 3  # absent, not 0
    assert sampler.latest[1].gpm_supported is False
    sampler.stop()
    assert fake.gpm_buffers == 0 and fake.init_count == 0
