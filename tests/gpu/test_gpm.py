"""GPM counters through the fake NVML: values between two samples, every way GPM is not there
(GPU, driver, nvidia-ml-py, permission), the minimum interval, and buffers freed."""

from __future__ import annotations

import pytest

from tfopt.gpu.gpm import GPM_METRICS, GPM_MIN_INTERVAL_S, GpmReader
from tfopt.gpu.nvml import NvmlSession
from tfopt.gpu.snapshot import GPM_FIELDS
from tfopt.gpu.testing import FakeGpu, make_fake_nvml

HOPPER = dict(name="NVIDIA H100 80GB HBM3", compute_capability=(9, 0))
COUNTERS = {"sm_active": [61.5, 80.0], "sm_occupancy": 33.25, "tensor_active": 47.0,
            "dram_bw_util": 12.5}


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def open_reader(*gpus, **fake_options):
    fake = make_fake_nvml(gpus, **fake_options)
    session = NvmlSession(fake)
    clock = FakeClock()
    return fake, session, GpmReader(session, clock=clock), clock


def test_metric_ids_are_nvmls_own():
    pynvml = pytest.importorskip("pynvml")
    assert GPM_METRICS == {
        "sm_active": pynvml.NVML_GPM_METRIC_SM_UTIL,
        "sm_occupancy": pynvml.NVML_GPM_METRIC_SM_OCCUPANCY,
        "tensor_active": pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
        "dram_bw_util": pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
    }
    assert tuple(GPM_METRICS) == GPM_FIELDS


def test_counters_come_between_two_samples_and_the_first_says_it_waits_for_the_second():
    fake, session, reader, clock = open_reader(FakeGpu(**HOPPER, gpm=COUNTERS))
    first = reader.read(0)
    assert first.supported and first.sm_active is None and "first GPM sample" in first.reason
    clock.now += 1.0
    second = reader.read(0)
    assert second.supported and second.reason is None
    assert (second.sm_active, second.sm_occupancy, second.tensor_active,
            second.dram_bw_util) == (61.5, 33.25, 47.0, 12.5)
    clock.now += 1.0
    assert reader.read(0).sm_active == 80.0  # the next interval's, from the next pair
    assert fake.gpm_buffers == 2  # two buffers per GPU, reused turn about
    reader.close()
    reader.close()  # twice is safe
    assert fake.gpm_buffers == 0
    session.close()


def test_a_read_too_soon_keeps_the_last_sample_so_the_next_spans_the_whole_interval():
    fake, session, reader, clock = open_reader(FakeGpu(**HOPPER, gpm=COUNTERS))
    reader.read(0)
    clock.now += GPM_MIN_INTERVAL_S / 2
    soon = reader.read(0)
    assert soon.supported and soon.sm_active is None and "since the last GPM sample" in soon.reason
    clock.now += GPM_MIN_INTERVAL_S  # the fake raises unless sample1 was taken before sample2
    assert reader.read(0).sm_active == 61.5
    reader.close()
    session.close()


@pytest.mark.parametrize("gpu, fake_options, reason", [
    (FakeGpu(), {}, "the GPU has no GPM counters"),  # an A100: GPM says no
    (FakeGpu(**HOPPER, gpm=COUNTERS, unsupported=frozenset({"gpm"})), {},
     "the GPU has no GPM counters"),  # the query itself answers NOT_SUPPORTED
    (FakeGpu(**HOPPER, gpm=COUNTERS), {"driver_lacks": ["nvmlGpmQueryDeviceSupport"]},
     "the NVIDIA driver has no GPM calls"),
    (FakeGpu(**HOPPER, gpm=COUNTERS), {"new_api": False},
     "this nvidia-ml-py has no GPM calls"),
])
def test_without_gpm_every_reading_says_why_and_carries_no_value(gpu, fake_options, reason):
    fake, session, reader, clock = open_reader(gpu, **fake_options)
    for _ in range(3):
        reading = reader.read(0)
        clock.now += 1.0
        assert reading.supported is False and reason in reading.reason
        assert all(getattr(reading, name) is None for name in GPM_FIELDS)
    assert fake.gpm_buffers == 0
    reader.close()
    session.close()


def test_a_sample_refused_for_permission_is_said_and_reading_goes_on_for_the_others():
    fake, session, reader, clock = open_reader(
        FakeGpu(**HOPPER, gpm=COUNTERS, gpm_sample_error=4), FakeGpu(**HOPPER, gpm=COUNTERS))
    assert reader.prime()
    clock.now += 1.0
    refused, read = reader.read(0), reader.read(1)
    assert refused.supported and refused.sm_active is None
    assert "nvmlGpmSampleGet failed (NoPermission)" in refused.reason
    assert read.sm_active == 61.5
    reader.close()
    session.close()


def test_a_counter_the_gpu_does_not_give_is_named_and_the_rest_are_read():
    fake, session, reader, clock = open_reader(
        FakeGpu(**HOPPER, gpm={"sm_active": 50.0, "tensor_active": 20.0}))
    reader.read(0)
    clock.now += 1.0
    reading = reader.read(0)
    assert (reading.sm_active, reading.tensor_active) == (50.0, 20.0)
    assert reading.sm_occupancy is None and reading.dram_bw_util is None
    assert "not read: sm_occupancy (NVML error 3), dram_bw_util (NVML error 3)" == reading.reason
    reader.close()
    session.close()


def test_annotate_fills_the_snapshots_and_prime_says_whether_any_gpu_has_gpm():
    fake, session, reader, clock = open_reader(FakeGpu(**HOPPER, gpm=COUNTERS), FakeGpu())
    assert reader.prime() is True
    clock.now += 1.0
    hopper, ampere = reader.annotate(session.snapshots())
    assert hopper.sm_active == 61.5 and hopper.gpm_supported and hopper.gpm_reason is None
    assert hopper.gpu_util == 97  # the rest of the reading as before
    assert ampere.sm_active is None and ampere.gpm_supported is False
    assert "no GPM" in ampere.gpm_reason
    reader.close()
    session.close()
    _, session, reader, _ = open_reader(FakeGpu())
    assert reader.prime() is False
    reader.close()
    session.close()


def test_a_session_without_nvml_primes_nothing():
    _, session, reader, _ = open_reader(FakeGpu(), init_error=9)
    assert reader.prime() is False
    reader.close()
    session.close()
