"""Driver/CUDA tables and compute-capability rules."""

from __future__ import annotations

import pytest

from tfopt.gpu.compat import (
    ArchSupport,
    arch_support,
    cuda_major_minor,
    driver_at_least,
    min_driver_for_cuda,
    parse_compute_capabilities,
    parse_version,
    tensor_core_dtypes,
)

TF_2_21 = ["sm_60", "sm_70", "sm_80", "sm_89", "compute_90"]  # this machine's TensorFlow build


def test_parse_version():
    assert parse_version("550.54.15") == (550, 54, 15)
    assert parse_version("12.5.1") == (12, 5, 1)
    assert parse_version("2.21.0rc1") == (2, 21, 0)
    assert parse_version("") is None and parse_version(None) is None
    assert parse_version("abc") is None
    assert cuda_major_minor("12") == (12, 0)
    assert cuda_major_minor("11.8.89") == (11, 8)


@pytest.mark.parametrize(
    "cuda, floor",
    [("11.2", "450.80.02"), ("11.8.0", "450.80.02"), ("12.5.1", "525.60.13"),
     ("12.0", "525.60.13"), ("13.0", "580.00"), ("10.2", None), ("x", None)],
)
def test_min_driver_for_cuda(cuda, floor):
    assert min_driver_for_cuda(cuda) == floor


def test_driver_at_least_compares_numerically():
    assert driver_at_least("525.60.13", "525.60.13")
    assert driver_at_least("535.104.05", "525.60.13")
    assert not driver_at_least("525.60.2", "525.60.13")  # 2 < 13, not "2" > "13"
    assert not driver_at_least("470.82.01", "525.60.13")
    assert driver_at_least("580", "580.00")
    assert driver_at_least(None, "525.60.13") is None


def test_parse_compute_capabilities_forms():
    sass, ptx = parse_compute_capabilities(["sm_60", "compute_90", "8.6", "sm_90a", "junk", ""])
    assert sass == {(6, 0), (8, 6), (9, 0)}
    assert ptx == {(9, 0), (8, 6)}
    assert parse_compute_capabilities(None) == (set(), set())
    assert parse_compute_capabilities(["sm_100", "compute_120"]) == ({(10, 0)}, {(12, 0)})


@pytest.mark.parametrize(
    "cc, compiled, support, entry",
    [
        ((8, 0), TF_2_21, ArchSupport.NATIVE, "sm_80"),
        ((8, 6), TF_2_21, ArchSupport.NATIVE, "sm_80"),  # binary compatible within major 8
        ((8, 9), TF_2_21, ArchSupport.NATIVE, "sm_89"),
        ((7, 5), TF_2_21, ArchSupport.NATIVE, "sm_70"),
        ((9, 0), TF_2_21, ArchSupport.PTX_JIT, "compute_90"),  # H100: PTX only
        ((12, 0), TF_2_21, ArchSupport.PTX_JIT, "compute_90"),  # newer arch JIT from PTX
        ((5, 2), TF_2_21, ArchSupport.UNSUPPORTED, None),
        ((8, 0), ["sm_86"], ArchSupport.UNSUPPORTED, None),  # SASS does not run on lower minor
        ((8, 0), ["sm_86", "compute_70"], ArchSupport.PTX_JIT, "compute_70"),
        ((7, 0), ["7.0"], ArchSupport.NATIVE, "sm_70"),
    ],
)
def test_arch_support(cc, compiled, support, entry):
    assert arch_support(cc, compiled) == (support, entry)


@pytest.mark.parametrize(
    "cc, dtypes",
    [((6, 1), ()), ((7, 0), ("float16",)), ((7, 5), ("float16",)),
     ((8, 0), ("float16", "bfloat16")), ((9, 0), ("float16", "bfloat16"))],
)
def test_tensor_core_dtypes(cc, dtypes):
    assert tensor_core_dtypes(cc) == dtypes
