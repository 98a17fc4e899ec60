"""The peak FLOPs per second a device can reach, per dtype: the denominator of model FLOPs
utilisation (MFU).

A CPU's peak comes from its own flags: cores x clock x the FLOPs one core's vector units
finish per cycle. An FMA counts 2 FLOPs. What the flags do not say is assumed and stated in
:attr:`PeakFlops.basis`: two FMA units per core (server x86 cores since Skylake-SP and Zen; a
core with one reaches half), AMD's Zen 4 running a 512-bit instruction on 256-bit units, and
AVX512-BF16's dot product finishing two bfloat16 products per float32 lane (twice float32's
rate). AMX's tiles finish 1024 bfloat16 FLOPs per cycle per core (Intel's figure for Sapphire
Rapids).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from tfopt.gpu.hardware import CpuFeatures

__all__ = ["PeakFlops", "cpu_peak"]

FMA_UNITS = 2  # per core: the common server x86 core; the basis says it is assumed
FLOAT32_BITS = 32
AMX_BF16_PER_CYCLE = 1024  # per core
ZEN4_FAMILY = 25  # AMD family 19h: Zen 3 (no AVX-512) and Zen 4 (AVX-512 on 256-bit units)


@dataclasses.dataclass(frozen=True)
class PeakFlops:
    """A device's peak FLOPs per second by compute dtype.

    Attributes:
        device: What was measured against, in words (the CPU model and cores, or the GPU).
        per_second: Peak FLOPs per second for "float32", "bfloat16" and "float16" (a dtype
            without faster instructions gets float32's).
        basis: How the figures were derived, in words: the clock, the units, what is assumed.
    """

    device: str
    per_second: Mapping[str, float]
    basis: str

    def for_dtype(self, dtype: str) -> float:
        """The peak for a compute dtype ("float32", "bfloat16", "float16"; a mixed policy's
        name gives its compute dtype's)."""
        name = str(dtype).removeprefix("mixed_")
        if name not in self.per_second:
            raise KeyError(f"{dtype!r}: expected one of {sorted(self.per_second)}")
        return self.per_second[name]


def _vector(features: CpuFeatures) -> tuple[int, str]:
    """(bits one FMA unit processes per cycle, the instruction set's name)."""
    if features.avx512f:
        if features.vendor == "AuthenticAMD" and features.family == ZEN4_FAMILY:
            return 256, "AVX-512 on 256-bit units (Zen 4)"
        return 512, "AVX-512"
    if "avx2" in features.flags and "fma" in features.flags:
        return 256, "AVX2 FMA"
    if "asimd" in features.flags:  # Arm's NEON
        return 128, "NEON"
    return 128, "SSE"


def cpu_peak(features: CpuFeatures, cores: int) -> PeakFlops | None:
    """The peak of ``cores`` cores of the CPU ``features`` describes; None when its clock is
    unknown (no peak is better than a made-up one).

    Example:
        >>> peak = cpu_peak(cpu_features(), usable_cores())
        >>> peak.for_dtype("mixed_bfloat16") > peak.for_dtype("float32")  # AVX512-BF16 here
        True
    """
    if not features.clock_mhz or cores < 1:
        return None
    bits, isa = _vector(features)
    fused = 2 if isa != "SSE" else 1
    float32_cycle = FMA_UNITS * (bits // FLOAT32_BITS) * fused
    hz = features.clock_mhz * 1e6
    float32 = cores * hz * float32_cycle
    bfloat16, bf16_how = float32, "as float32 (no bfloat16 instructions)"
    if features.amx_bf16:
        bfloat16, bf16_how = cores * hz * AMX_BF16_PER_CYCLE, (
            f"AMX tiles, {AMX_BF16_PER_CYCLE} per cycle per core")
    elif features.avx512_bf16:
        bfloat16, bf16_how = 2 * float32, "AVX512-BF16 dot products, twice float32's"
    device = f"{features.model or 'CPU'}, {cores} core{'s' if cores != 1 else ''}"
    basis = (f"{cores} x {features.clock_mhz:.0f} MHz x {float32_cycle} float32 FLOPs per "
             f"cycle ({FMA_UNITS} {isa} units of {bits // FLOAT32_BITS} lanes"
             f"{', fused multiply-add' if fused == 2 else ''}; two units per core assumed); "
             f"bfloat16 {bf16_how}")
    return PeakFlops(device=device,
                     per_second={"float32": float32, "bfloat16": bfloat16, "float16": float32},
                     basis=basis)
