"""The memory probe: resident memory is read and sampled; the allocator is chosen when it can be."""

from __future__ import annotations

from tfopt.tune import memory


def test_resident_memory_is_read_and_its_peak_sampled_during_a_block():
    before = memory.resident_bytes()
    assert before is not None and before > 0
    with memory.RssSampler() as sampler:
        block = bytearray(64 << 20)  # 64 MB touched while sampling
        block[::4096] = b"x" * len(block[::4096])
    assert sampler.peak >= before
    del block


def test_the_probe_measures_with_the_allocator_under_bfc_or_else_resident_memory(
        tf, monkeypatch):
    monkeypatch.setenv("TF_CPU_ALLOCATOR_USE_BFC", "1")
    assert memory.MemoryProbe(tf, 0).kind == "tf-allocator"
    monkeypatch.delenv("TF_CPU_ALLOCATOR_USE_BFC")
    probe = memory.MemoryProbe(tf, extra_bytes=1000)
    assert probe.kind == "rss" and probe.device == "CPU:0"
    assert probe.measure(lambda: None) >= 1000  # growth (none here) plus the variables


def test_the_default_budget_is_half_the_available_memory_on_a_cpu(tf):
    budget = memory.default_budget(tf)
    with open("/proc/meminfo", encoding="ascii") as handle:
        available = next(int(line.split()[1]) * 1024 for line in handle
                         if line.startswith("MemAvailable:"))
    assert 0.3 * available < budget < 0.7 * available
