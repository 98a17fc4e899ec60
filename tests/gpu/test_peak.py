"""Peak FLOPs from a CPU's own flags (pure arithmetic on hand-made facts) and from a GPU's
datasheet row, found by the name NVML gives it."""

from __future__ import annotations

import pytest

from tfopt.errors import InvalidArgumentError
from tfopt.gpu.hardware import CpuFeatures, cpu_features
from tfopt.gpu.peak import GPU_DATASHEETS, cpu_peak, gpu_peak, gpus_peak

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


# -- GPUs: NVIDIA's datasheets by NVML's name ---------------------------------------------------

TERA = 1e12


NVML_NAMES = [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM"),
    ("NVIDIA A100-SXM4-40GB", "A100 SXM"),
    ("A100-SXM-80GB", "A100 SXM"),  # an older driver's spelling
    ("NVIDIA A100-PCIE-40GB", "A100 PCIe"),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe"),
    ("Tesla V100-SXM2-16GB", "V100 SXM2"),
    ("Tesla V100-SXM2-32GB", "V100 SXM2"),
    ("Tesla V100-PCIE-32GB", "V100 PCIe"),
    ("Tesla V100S-PCIE-32GB", "V100S PCIe"),
    ("Tesla T4", "T4"),
    ("NVIDIA H200", "H200 SXM"),
    ("NVIDIA H200 NVL", "H200 NVL"),
    ("NVIDIA L4", "L4"),
    ("NVIDIA L40", "L40"),
    ("NVIDIA L40S", "L40S"),
    ("NVIDIA A10", "A10"),
    ("NVIDIA A30", "A30"),
    ("NVIDIA A40", "A40"),
    ("NVIDIA RTX A6000", "RTX A6000"),
    ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada"),
    ("NVIDIA B200", "B200"),
    ("  nvidia h100 pcie ", "H100 PCIe"),  # case and spaces do not matter
]


@pytest.mark.parametrize("name, row", NVML_NAMES)
def test_each_nvml_name_form_finds_its_datasheet_row(name, row):
    peak = gpu_peak(name)
    assert peak is not None, name
    assert peak.device.endswith(f"({row})") and f"NVIDIA's {row} row" in peak.basis
    assert GPU_DATASHEETS[row].source in peak.basis


@pytest.mark.parametrize("name", [
    "NVIDIA A10G",  # a cloud part with its own clocks, not the A10
    "NVIDIA GeForce RTX 4090", "Quadro RTX 6000", "NVIDIA H800", "NVIDIA GB200",
    "NVIDIA H100",  # no form in the name: SXM, PCIe and NVL differ
    "NVIDIA A100-SXM4-40GB MIG 1g.5gb",  # a slice of the GPU, not the GPU
    "", "AMD Instinct MI300X",
])
def test_an_unknown_gpu_has_no_peak_rather_than_a_guessed_one(name):
    assert gpu_peak(name) is None


def test_figures_are_the_dense_ones_with_sparsity_halved_and_said():
    h100 = gpu_peak("NVIDIA H100 80GB HBM3")
    assert h100.for_dtype("mixed_bfloat16") == pytest.approx(989.5 * TERA)  # not 1979
    assert h100.for_dtype("float16") == pytest.approx(989.5 * TERA)
    assert h100.for_dtype("float32") == pytest.approx(67 * TERA)  # CUDA cores, not TF32
    assert h100.for_dtype("tensorfloat32") == pytest.approx(494.5 * TERA)
    assert "sparsity figures: halved" in h100.basis
    a100 = gpu_peak("NVIDIA A100-SXM4-80GB")  # its datasheet prints the dense figure itself
    assert a100.for_dtype("bfloat16") == pytest.approx(312 * TERA)
    assert "halved" not in a100.basis and "dense" in a100.basis
    assert gpu_peak("NVIDIA L4").for_dtype("bfloat16") == pytest.approx(121 * TERA)
    assert gpu_peak("NVIDIA B200").for_dtype("bfloat16") == pytest.approx(2250 * TERA)


def test_bfloat16_beats_float32_from_ampere_on_and_equals_it_before():
    for name in ("NVIDIA A100-SXM4-40GB", "NVIDIA A10", "NVIDIA L4", "NVIDIA L40S",
                 "NVIDIA H100 PCIe", "NVIDIA H200", "NVIDIA RTX A6000", "NVIDIA B200"):
        peak = gpu_peak(name)
        assert peak.for_dtype("bfloat16") > peak.for_dtype("float32"), name
    for name in ("Tesla V100-SXM2-16GB", "Tesla T4"):
        peak = gpu_peak(name)
        assert peak.for_dtype("bfloat16") == peak.for_dtype("float32"), name
        assert peak.for_dtype("float16") > peak.for_dtype("float32")  # FP16 tensor cores
        assert "bfloat16 as float32" in peak.basis and "tensorfloat32" not in peak.per_second


def test_every_row_cites_its_source_and_some_nvml_name_reaches_it():
    for row in GPU_DATASHEETS.values():
        assert row.source.startswith("https://"), row.row
        assert row.float32 > 0 and row.float16 > row.float32, row.row
    assert {row for _, row in NVML_NAMES} == set(GPU_DATASHEETS)


def test_a_name_that_is_not_a_string_is_refused_naming_the_argument():
    with pytest.raises(InvalidArgumentError, match="name=None: expected"):
        gpu_peak(None)


def test_the_gpus_of_one_step_add_up_and_float32_runs_at_tf32_where_it_is_on():
    one = gpu_peak("NVIDIA H100 80GB HBM3")
    two = gpus_peak(["NVIDIA H100 80GB HBM3"] * 2, tensorfloat32=True)
    assert two.device.startswith("2 x NVIDIA H100 80GB HBM3")
    assert two.for_dtype("bfloat16") == 2 * one.for_dtype("bfloat16")
    assert two.for_dtype("float32") == 2 * one.for_dtype("tensorfloat32")
    assert "TF32" in two.basis
    strict = gpus_peak(["NVIDIA H100 80GB HBM3"], tensorfloat32=False)
    assert strict.for_dtype("float32") == one.for_dtype("float32")
    # before Ampere there is no TF32: float32 stays the CUDA cores' rate
    volta = gpus_peak(["Tesla V100-SXM2-16GB"], tensorfloat32=True)
    assert volta.for_dtype("float32") == gpu_peak("Tesla V100-SXM2-16GB").for_dtype("float32")
    assert gpus_peak(["NVIDIA H100 80GB HBM3", "NVIDIA A10G"], tensorfloat32=True) is None
    assert gpus_peak([], tensorfloat32=True) is None
