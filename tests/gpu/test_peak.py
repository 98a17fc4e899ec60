"""Peak FLOPs from a CPU's own flags: pure arithmetic on hand-made facts."""

from __future__ import annotations

import pytest

from tfopt.gpu.hardware import CpuFeatures, cpu_features
from tfopt.gpu.peak import cpu_peak

GHZ = 1000.0  # MHz


def cpu(flags, vendor="GenuineIntel", family=6, clock_mhz=2 * GHZ, model="Xeon"):
    return CpuFeatures(model=model, machine="x86_64", flags=frozenset(flags.split()),
                       vendor=vendor, family=family, clock_mhz=clock_mhz)


def test_avx512_cores_finish_64_float32_flops_a_cycle_and_bf16_twice_that():
    peak = cpu_peak(cpu("avx2 fma avx512f avx512_bf16"), cores=4)
    assert peak.for_dtype("float32") == 4 * 2e9 * 64  # 2 units x 16 lanes x FMA
    assert peak.for_dtype("mixed_bfloat16") == 2 * peak.for_dtype("float32")
    assert peak.for_dtype("float16") == peak.for_dtype("float32")
    assert "4 x 2000 MHz x 64 float32 FLOPs per cycle" in peak.basis and "Xeon, 4 cores" == \
        peak.device


def test_zen4_runs_avx512_on_256_bit_units_and_avx2_is_half_of_avx512():
    zen4 = cpu_peak(cpu("avx2 fma avx512f avx512_bf16", vendor="AuthenticAMD", family=25),
                    cores=2)
    zen5 = cpu_peak(cpu("avx2 fma avx512f avx512_bf16", vendor="AuthenticAMD", family=26),
                    cores=2)
    avx2 = cpu_peak(cpu("avx2 fma"), cores=2)
    assert zen4.for_dtype("float32") == avx2.for_dtype("float32") == 2 * 2e9 * 32
    assert zen5.for_dtype("float32") == 2 * zen4.for_dtype("float32")
    assert avx2.for_dtype("bfloat16") == avx2.for_dtype("float32")  # no bfloat16 instructions
    assert "Zen 4" in zen4.basis


def test_amx_tiles_give_bfloat16_its_own_rate_and_an_unknown_clock_no_peak():
    amx = cpu_peak(cpu("avx2 fma avx512f avx512_bf16 amx_bf16 amx_tile"), cores=1)
    assert amx.for_dtype("bfloat16") == 2e9 * 1024
    assert cpu_peak(cpu("avx2 fma", clock_mhz=None), cores=2) is None
    with pytest.raises(KeyError, match="expected one of"):
        amx.for_dtype("int8")


def test_cpuinfo_gives_vendor_family_and_clock_and_cpufreq_the_highest_clock(tmp_path,
                                                                             monkeypatch):
    from tfopt.gpu import hardware

    monkeypatch.setattr(hardware, "CPUFREQ_MAX_PATH", str(tmp_path / "absent"))
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n"
                    "model name\t: AMD EPYC 9654\ncpu MHz\t\t: 2400.000\n"
                    "flags\t\t: fpu avx2 fma avx512f avx512_bf16\n\n"
                    "processor\t: 1\nvendor_id\t: Other\ncpu MHz\t\t: 1.0\n")
    facts = cpu_features(str(info))
    assert (facts.vendor, facts.family, facts.model) == ("AuthenticAMD", 25, "AMD EPYC 9654")
    assert facts.avx512_bf16 and facts.clock_mhz == 2400.0  # the first core's line
    (tmp_path / "max_freq").write_text("3700000\n")  # kHz
    monkeypatch.setattr(hardware, "CPUFREQ_MAX_PATH", str(tmp_path / "max_freq"))
    assert cpu_features(str(info)).clock_mhz == 3700.0
