"""Compatibility rules between the NVIDIA driver, the CUDA a TensorFlow build uses, and GPUs.

Pure functions over version strings and compute capabilities; no NVML, no TensorFlow.
"""

from __future__ import annotations

import enum
import re

# Minimum Linux driver per CUDA major version under CUDA *minor version compatibility*
# (CUDA Toolkit release notes, "CUDA Toolkit and Corresponding Driver Versions" and "CUDA
# Compatibility"): since CUDA 11, an application built with any 11.x or 12.x toolkit runs on any
# driver of the same major family at or above this floor, even one whose own CUDA version is
# older (e.g. a CUDA 12.5 build on driver 525, which reports CUDA 12.0). The catch: PTX JIT of
# newer PTX does not work in that mode, so a GPU that has no native code in the build fails.
# CUDA 13.0 raised the floor of its family to the R580 driver branch.
MIN_DRIVER_FOR_CUDA_MAJOR: dict[int, str] = {
    11: "450.80.02",
    12: "525.60.13",
    13: "580.00",
}


def parse_version(text: str | None) -> tuple[int, ...] | None:
    """The leading numbers of a version string: "550.54.15" -> (550, 54, 15).

    Returns None when the text has no leading number.

    Example:
        >>> parse_version("12.5.1")
        (12, 5, 1)
    """
    if not text:
        return None
    match = re.match(r"\d+(?:\.\d+)*", str(text).strip())
    return tuple(int(part) for part in match.group(0).split(".")) if match else None


def cuda_major_minor(text: str | None) -> tuple[int, int] | None:
    """(major, minor) of a CUDA version string: "12.5.1" -> (12, 5); "12" -> (12, 0)."""
    version = parse_version(text)
    if version is None:
        return None
    return (version[0], version[1] if len(version) > 1 else 0)


def min_driver_for_cuda(cuda: str | None) -> str | None:
    """The minimum Linux driver version that runs a build made with CUDA ``cuda``.

    Args:
        cuda: A CUDA version such as "12.5.1".

    Returns:
        The driver version floor, or None for CUDA versions the table does not know.

    Example:
        >>> min_driver_for_cuda("12.5.1")
        '525.60.13'
    """
    mm = cuda_major_minor(cuda)
    return None if mm is None else MIN_DRIVER_FOR_CUDA_MAJOR.get(mm[0])


def driver_at_least(driver: str | None, minimum: str | None) -> bool | None:
    """True if ``driver`` >= ``minimum`` (numeric, field by field); None if either is unknown."""
    have, need = parse_version(driver), parse_version(minimum)
    if have is None or need is None:
        return None
    width = max(len(have), len(need))
    return have + (0,) * (width - len(have)) >= need + (0,) * (width - len(need))


class ArchSupport(enum.Enum):
    """How a TensorFlow build runs on a GPU of a given compute capability."""

    NATIVE = "native"  # SASS (machine code) for the GPU's architecture is in the build
    PTX_JIT = "ptx_jit"  # only PTX of a lower architecture: compiled by the driver at startup
    UNSUPPORTED = "unsupported"  # nothing that can run on this GPU


def parse_compute_capabilities(entries) -> tuple[set[tuple[int, int]], set[tuple[int, int]]]:
    """Split a build's compiled capabilities into SASS and PTX sets of (major, minor).

    TensorFlow reports them as "sm_80" (SASS only), "compute_90" (PTX only) or, in some older
    builds, "8.0" (both). Arch-specific "sm_90a" counts as SASS for 9.0 only; entries that cannot
    be read are ignored.

    Example:
        >>> parse_compute_capabilities(["sm_80", "compute_90"])
        ({(8, 0)}, {(9, 0)})
    """
    sass: set[tuple[int, int]] = set()
    ptx: set[tuple[int, int]] = set()
    for entry in entries or ():
        text = str(entry).strip().lower()
        match = re.fullmatch(r"(sm|compute)_(\d+)(\d)[af]?", text)
        if match:
            cc = (int(match.group(2)), int(match.group(3)))
            (sass if match.group(1) == "sm" else ptx).add(cc)
            continue
        match = re.fullmatch(r"(\d+)\.(\d+)", text)
        if match:
            cc = (int(match.group(1)), int(match.group(2)))
            sass.add(cc)
            ptx.add(cc)
    return sass, ptx


def arch_support(capability: tuple[int, int], compiled) -> tuple[ArchSupport, str | None]:
    """Whether a build's compiled code runs on a GPU, natively or through PTX JIT.

    SASS built for major.y runs on major.z for z >= y (binary compatibility within one major
    architecture); PTX of any lower or equal capability is JIT-compiled by the driver, which
    costs minutes on first start and is lost unless the CUDA cache (CUDA_CACHE_MAXSIZE) keeps it.

    Args:
        capability: The GPU's (major, minor).
        compiled: The build's list, e.g. ["sm_60", "sm_80", "compute_90"].

    Returns:
        (support, the compiled entry used, e.g. "sm_80"; None when unsupported).

    Example:
        >>> arch_support((8, 6), ["sm_80", "compute_90"])
        (<ArchSupport.NATIVE: 'native'>, 'sm_80')
    """
    sass, ptx = parse_compute_capabilities(compiled)
    native = [cc for cc in sass if cc[0] == capability[0] and cc[1] <= capability[1]]
    if native:
        best = max(native)
        return ArchSupport.NATIVE, f"sm_{best[0]}{best[1]}"
    jit = [cc for cc in ptx if cc <= capability]
    if jit:
        best = max(jit)
        return ArchSupport.PTX_JIT, f"compute_{best[0]}{best[1]}"
    return ArchSupport.UNSUPPORTED, None


def tensor_core_dtypes(capability: tuple[int, int]) -> tuple[str, ...]:
    """The mixed-precision dtypes this GPU's tensor cores run fast.

    float16 needs Volta (7.0) or newer; bfloat16 needs Ampere (8.0) or newer.

    Example:
        >>> tensor_core_dtypes((7, 5))
        ('float16',)
    """
    dtypes = []
    if capability >= (7, 0):
        dtypes.append("float16")
    if capability >= (8, 0):
        dtypes.append("bfloat16")
    return tuple(dtypes)
