"""The peak FLOPs per second a device can reach, per dtype: the denominator of model FLOPs
utilisation (MFU).

A CPU's peak comes from its own flags: cores x clock x the FLOPs one core's vector units
finish per cycle. An FMA counts 2 FLOPs. What the flags do not say is assumed and stated in
:attr:`PeakFlops.basis`: two FMA units per core (server x86 cores since Skylake-SP and Zen; a
core with one reaches half), AMD's Zen 4 running a 512-bit instruction on 256-bit units, and
AVX512-BF16's dot product finishing two bfloat16 products per float32 lane (twice float32's
rate). AMX's tiles finish 1024 bfloat16 FLOPs per cycle per core (Intel's figure for Sapphire
Rapids).

A GPU's peak comes from NVIDIA's datasheets (:data:`GPU_DATASHEETS`), found by the name NVML
gives the GPU (:func:`gpu_peak`). The tensor-core figures are the dense ones: where a datasheet
gives only the 2:4 sparsity figure, it is halved. float32 is the plain FP32 rate of the CUDA
cores; the TF32 tensor-core rate, which TensorFlow uses for float32 matrix products and
convolutions on Ampere and newer unless told not to, is kept apart as "tensorfloat32". A GPU
without bfloat16 tensor cores (before Ampere) gets float32's figure for bfloat16, as a CPU
without bfloat16 instructions does. An unknown GPU gets no peak: never one guessed from a
similar name.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence

from tfopt.errors import InvalidArgumentError
from tfopt.gpu.hardware import CpuFeatures

__all__ = ["GPU_DATASHEETS", "GpuDatasheet", "PeakFlops", "cpu_peak", "gpu_peak",
           "gpus_peak"]

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
            without faster instructions gets float32's); a GPU with TF32 tensor cores also
            has "tensorfloat32".
        basis: How the figures were derived, in words: the clock, the units, what is assumed;
            for a GPU, the datasheet row and its address.
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


TERA = 1e12

# Where each row's figures are printed: NVIDIA's datasheets and product pages; the workstation
# Ada card's tensor rates from the Ada architecture whitepaper (its datasheet prints one FP8
# figure with sparsity).
_NVIDIA = "https://www.nvidia.com/content/dam/en-zz/Solutions"
_V100 = ("https://images.nvidia.com/content/technologies/volta/pdf/"
         "volta-v100-datasheet-update-us-1165301-r5.pdf")
_T4 = f"{_NVIDIA}/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf"
_A100 = f"{_NVIDIA}/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
_A10 = f"{_NVIDIA}/Data-Center/a10/pdf/a10-datasheet.pdf"
_A30 = f"{_NVIDIA}/data-center/products/a30-gpu/pdf/a30-datasheet.pdf"
_A40 = "https://images.nvidia.com/content/Solutions/data-center/a40/nvidia-a40-datasheet.pdf"
_L4 = "https://resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet"
_L40 = "https://images.nvidia.com/content/Solutions/data-center/vgpu-L40-datasheet.pdf"
_L40S = "https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413"
_H100 = "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
_H200 = "https://www.nvidia.com/en-us/data-center/h200/"
_B200 = "https://www.nvidia.com/en-us/data-center/hgx/"
_RTX_A6000 = "https://www.nvidia.com/en-us/design-visualization/rtx-a6000/"
_RTX_6000_ADA = ("https://images.nvidia.com/aem-dam/Solutions/Data-Center/l4/"
                 "nvidia-ada-gpu-architecture-whitepaper-v2.1.pdf")


@dataclasses.dataclass(frozen=True)
class GpuDatasheet:
    """One GPU's row of NVIDIA's published figures, in TFLOPS, as the source prints them.

    Attributes:
        row: The product and form, e.g. "H100 SXM".
        float32: FP32 on the CUDA cores (no tensor cores).
        tensorfloat32: TF32 on the tensor cores; None where there is none (before Ampere) or
            the source prints none.
        bfloat16: BF16 on the tensor cores; None before Ampere (no bfloat16 tensor cores).
        float16: FP16 on the tensor cores.
        source: The datasheet's (or whitepaper's) address.
        sparse: The tensor figures are the source's 2:4 sparsity ones (all it prints), halved
            to the dense rate when read; False where the source gives the dense figure.
    """

    row: str
    float32: float
    tensorfloat32: float | None
    bfloat16: float | None
    float16: float
    source: str
    sparse: bool = False

    def peak(self, device: str) -> PeakFlops:
        """The dense :class:`PeakFlops` of this row, for the GPU NVML calls ``device``."""
        scale = 0.5 if self.sparse else 1.0
        per_second = {"float32": self.float32 * TERA, "float16": self.float16 * scale * TERA}
        if self.bfloat16 is None:
            per_second["bfloat16"] = per_second["float32"]
            tensor = ("float16 on the tensor cores; bfloat16 as float32 (no bfloat16 tensor "
                      "cores before Ampere)")
        else:
            per_second["bfloat16"] = self.bfloat16 * scale * TERA
            tensor = "bfloat16 and float16 on the tensor cores"
        if self.tensorfloat32 is not None:
            per_second["tensorfloat32"] = self.tensorfloat32 * scale * TERA
            tensor += ", tensorfloat32 (TF32) too"
        dense = ("the source prints the 2:4 sparsity figures: halved here to the dense rate"
                 if self.sparse else "the source's dense figures")
        basis = (f"NVIDIA's {self.row} row ({self.source}): float32 is FP32 on the CUDA cores; "
                 f"{tensor}; {dense}")
        return PeakFlops(device=f"{device} ({self.row})", per_second=per_second, basis=basis)


# NVIDIA's published figures, in TFLOPS: float32, tensorfloat32, bfloat16, float16.
GPU_DATASHEETS: dict[str, GpuDatasheet] = {row.row: row for row in (
    GpuDatasheet("V100 SXM2", 15.7, None, None, 125, _V100),
    GpuDatasheet("V100 PCIe", 14, None, None, 112, _V100),
    GpuDatasheet("V100S PCIe", 16.4, None, None, 130, _V100),
    GpuDatasheet("T4", 8.1, None, None, 65, _T4),
    GpuDatasheet("A100 SXM", 19.5, 156, 312, 312, _A100),  # 40 GB and 80 GB alike
    GpuDatasheet("A100 PCIe", 19.5, 156, 312, 312, _A100),
    GpuDatasheet("A10", 31.2, 62.5, 125, 125, _A10),
    GpuDatasheet("A30", 10.3, 82, 165, 165, _A30),
    GpuDatasheet("A40", 37.4, 74.8, 149.7, 149.7, _A40),
    GpuDatasheet("RTX A6000", 38.7, None, 309.7, 309.7, _RTX_A6000, sparse=True),
    GpuDatasheet("L4", 30.3, 120, 242, 242, _L4, sparse=True),
    GpuDatasheet("L40", 90.5, 90.5, 181.05, 181.05, _L40),
    GpuDatasheet("L40S", 91.6, 183, 362.05, 362.05, _L40S),
    GpuDatasheet("RTX 6000 Ada", 91.1, 182.1, 364.2, 364.2, _RTX_6000_ADA),
    GpuDatasheet("H100 SXM", 67, 989, 1979, 1979, _H100, sparse=True),
    GpuDatasheet("H100 PCIe", 51, 756, 1513, 1513, _H100, sparse=True),
    GpuDatasheet("H100 NVL", 60, 835, 1671, 1671, _H100, sparse=True),
    GpuDatasheet("H200 SXM", 67, 989, 1979, 1979, _H200, sparse=True),
    GpuDatasheet("H200 NVL", 60, 835, 1671, 1671, _H200, sparse=True),
    GpuDatasheet("B200", 75, 2200, 4500, 4500, _B200, sparse=True),  # HGX B200, per GPU
)}

# NVML's device name, normalised (_normalise), matched whole -> the row. Matching whole keeps
# "A10G" (a cloud variant with figures of its own) off the A10 row, "L40S" off the L40 row and a MIG
# slice ("... MIG 1g.10gb") off every row; a name no pattern matches has no peak.
_NAME_PATTERNS = tuple((re.compile(pattern), row) for pattern, row in (
    (r"V100 SXM2", "V100 SXM2"),
    (r"V100 PCIE", "V100 PCIe"),
    (r"V100S PCIE", "V100S PCIe"),
    (r"T4", "T4"),
    (r"A100 SXM4?", "A100 SXM"),
    (r"A100 PCIE", "A100 PCIe"),
    (r"A10", "A10"),
    (r"A30", "A30"),
    (r"A40", "A40"),
    (r"RTX A6000", "RTX A6000"),
    (r"L4", "L4"),
    (r"L40", "L40"),
    (r"L40S", "L40S"),
    (r"RTX 6000 ADA( GENERATION)?", "RTX 6000 Ada"),
    (r"H100( SXM5?)? HBM3|H100 SXM5?", "H100 SXM"),  # "NVIDIA H100 80GB HBM3"
    (r"H100 PCIE|H100 HBM2E", "H100 PCIe"),  # the PCIe card is the H100 with HBM2e
    (r"H100 NVL", "H100 NVL"),
    (r"H200( SXM5?)?( HBM3E)?", "H200 SXM"),
    (r"H200 NVL", "H200 NVL"),
    (r"B200( HBM3E)?", "B200"),
))
_VENDOR = re.compile(r"^(NVIDIA|TESLA)\s+")
_MEMORY = re.compile(r"\s\d+\s?GB\b")  # "80GB", "80 GB": the same chip at one rate


def _normalise(name: str) -> str:
    """NVML's name in one spelling: upper case, no vendor prefix, no memory size, words
    separated by single spaces ("NVIDIA A100-SXM4-80GB" -> "A100 SXM4")."""
    text = " ".join(re.sub(r"[-_]", " ", name).upper().split())
    while _VENDOR.match(text):
        text = _VENDOR.sub("", text)
    return " ".join(_MEMORY.sub(" ", f" {text}").split())


def gpu_peak(name: str) -> PeakFlops | None:
    """The dense peak of the GPU NVML calls ``name`` (``GpuSnapshot.name``); None for a GPU
    the table does not hold (no peak is better than a guessed one).

    Args:
        name: NVML's device name, e.g. "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB",
            "Tesla V100-SXM2-16GB".

    Raises:
        InvalidArgumentError: name is not a string.

    Example:
        >>> gpu_peak("NVIDIA H100 80GB HBM3").for_dtype("mixed_bfloat16")
        989500000000000.0
    """
    if not isinstance(name, str):
        raise InvalidArgumentError(f"name={name!r}: expected NVML's device name, a string")
    key = _normalise(name)
    for pattern, row in _NAME_PATTERNS:
        if pattern.fullmatch(key):
            return GPU_DATASHEETS[row].peak(name.strip())
    return None


def gpus_peak(names: Sequence[str], *, tensorfloat32: bool) -> PeakFlops | None:
    """The peak of the GPUs one worker trains on together (a mirrored step's examples are
    all of theirs): the sum of each one's; None where any of them is not in the table.

    Args:
        names: NVML's (or CUDA's) name of each GPU in the step.
        tensorfloat32: TensorFlow runs float32 matrix products on TF32 tensor cores
            (``tf.config.experimental.tensor_float_32_execution_enabled()``): float32 is
            measured against TF32's rate on a GPU that has it, as that is what it runs at.
    """
    peaks = [gpu_peak(name) for name in names]
    if not peaks or any(peak is None for peak in peaks):
        return None
    dtypes = [dtype for dtype in peaks[0].per_second
              if all(dtype in peak.per_second for peak in peaks)]
    per_second = {dtype: sum(peak.per_second[dtype] for peak in peaks) for dtype in dtypes}
    devices = list(dict.fromkeys(peak.device for peak in peaks))
    device = (f"{len(peaks)} x {devices[0]}" if len(devices) == 1 < len(peaks)
              else " + ".join(peak.device for peak in peaks))
    basis = "; ".join(dict.fromkeys(peak.basis for peak in peaks))
    if tensorfloat32 and "tensorfloat32" in per_second:
        per_second["float32"] = per_second["tensorfloat32"]
        basis += ("; float32 at TF32's rate, as TensorFlow runs float32 matrix products on "
                  "the tensor cores (tensor_float_32_execution on)")
    return PeakFlops(device=device, per_second=per_second, basis=basis)
