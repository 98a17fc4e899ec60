"""The doctor's checks, each branch driven by hand-made facts, and end to end with a fake NVML."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tfopt.gpu import doctor
from tfopt.gpu.doctor import CheckStatus, run_doctor
from tfopt.gpu.hardware import CpuFeatures, GpuInfo, HardwareFacts, TensorFlowInfo
from tfopt.gpu.nvml import NvmlState, NvmlStatus, make_state
from tfopt.gpu.testing import FakeGpu, make_fake_nvml

OK, WARN, FAIL, SKIP = CheckStatus.OK, CheckStatus.WARN, CheckStatus.FAIL, CheckStatus.SKIP
TF_CUDA = TensorFlowInfo(
    installed=True, importable=True, version="2.21.0", keras_version="3.12.0",
    is_cuda_build=True, cuda_version="12.5.1", cudnn_version="9",
    compute_capabilities=("sm_60", "sm_70", "sm_80", "sm_89", "compute_90"),
    visible_gpus=2, memory_growth=(False, False),
)
A100 = GpuInfo(0, "NVIDIA A100-SXM4-40GB", "GPU-0", (8, 0), 40 << 30)
H100 = GpuInfo(1, "NVIDIA H100 80GB HBM3", "GPU-1", (9, 0), 80 << 30)


def driver(version="550.54.15", cuda=12040, count=2):
    return NvmlState(NvmlStatus.OK, "ok", driver_version=version, cuda_driver_version=cuda,
                     device_count=count)


def facts(**changes) -> HardwareFacts:
    base = HardwareFacts(
        python_version=(3, 11, 7),
        cpu=CpuFeatures("AMD EPYC", "x86_64", frozenset({"avx2", "avx512f"})),
        nvml=driver(),
        gpus=(A100, dataclasses.replace(H100)),
        tensorflow=TF_CUDA,
        env={},
    )
    return dataclasses.replace(base, **changes)


def tf(**changes) -> TensorFlowInfo:
    return dataclasses.replace(TF_CUDA, **changes)


def only(checks, name=None):
    if name is not None:
        checks = [c for c in checks if c.name == name]
    assert len(checks) == 1, checks
    return checks[0]


# -- Python, TensorFlow, Keras ------------------------------------------------------------------


def test_python_version():
    assert only(doctor.check_python(facts())).status is OK
    old = only(doctor.check_python(facts(python_version=(3, 10, 14))))
    assert old.status is FAIL and "3.11" in old.recommendation


def test_tensorflow_and_keras_ok():
    checks = doctor.check_tensorflow(facts())
    assert [(c.name, c.status) for c in checks] == [("TensorFlow", OK), ("Keras", OK)]
    assert "2.21.0" in checks[0].summary


def test_tensorflow_not_installed_is_a_warning_with_install_hint():
    no_tf = TensorFlowInfo(installed=False, keras_version="3.12.0")
    check = only(doctor.check_tensorflow(facts(tensorflow=no_tf)), "TensorFlow")
    assert check.status is WARN and "not installed" in check.summary
    assert "tensorflow[and-cuda]" in check.recommendation  # GPUs are present
    cpu_machine = facts(tensorflow=no_tf, nvml=make_state(NvmlStatus.LIBRARY_MISSING), gpus=())
    check = only(doctor.check_tensorflow(cpu_machine), "TensorFlow")
    assert check.recommendation == "pip install tensorflow"


def test_tensorflow_not_importable_fails():
    broken = tf(importable=False, error="ImportError: libcudart.so.12")
    check = only(doctor.check_tensorflow(facts(tensorflow=broken)), "TensorFlow")
    assert check.status is FAIL and "libcudart" in check.summary


def test_tensorflow_and_keras_too_old():
    checks = doctor.check_tensorflow(facts(tensorflow=tf(version="2.15.1",
                                                         keras_version="2.15.0")))
    assert [c.status for c in checks] == [FAIL, FAIL]
    missing_keras = doctor.check_tensorflow(facts(tensorflow=tf(keras_version=None)))
    assert only(missing_keras, "Keras").status is FAIL


def test_tensorflow_not_probed_is_skipped():
    assert only(doctor.check_tensorflow(facts(tensorflow=None))).status is SKIP


# -- build, driver -------------------------------------------------------------------------------


def test_build_cuda():
    check = only(doctor.check_build(facts()))
    assert check.status is OK and "CUDA 12.5.1" in check.summary and "compute_90" in check.summary


def test_build_cpu_only_with_and_without_gpus():
    cpu_build = tf(is_cuda_build=False, cuda_version=None, compute_capabilities=())
    fail = only(doctor.check_build(facts(tensorflow=cpu_build)))
    assert fail.status is FAIL and "CPU-only" in fail.summary
    assert "tensorflow[and-cuda]" in fail.recommendation
    fine = only(doctor.check_build(facts(tensorflow=cpu_build, gpus=(),
                                         nvml=make_state(NvmlStatus.LIBRARY_MISSING))))
    assert fine.status is OK
    rocm = only(doctor.check_build(facts(tensorflow=tf(is_cuda_build=False, is_rocm_build=True))))
    assert rocm.status is FAIL and "ROCm" in rocm.summary
    assert only(doctor.check_build(facts(tensorflow=tf(importable=False)))).status is SKIP


@pytest.mark.parametrize("status", list(NvmlStatus))
def test_driver_check_covers_every_nvml_status(status):
    state = driver() if status is NvmlStatus.OK else make_state(status, "detail")
    check = only(doctor.check_driver(facts(nvml=state)))
    expected = {
        NvmlStatus.OK: OK, NvmlStatus.PYNVML_MISSING: WARN, NvmlStatus.LIBRARY_MISSING: WARN,
        NvmlStatus.NO_GPUS: WARN, NvmlStatus.DRIVER_NOT_LOADED: FAIL,
        NvmlStatus.VERSION_MISMATCH: FAIL, NvmlStatus.NO_PERMISSION: FAIL,
        NvmlStatus.ERROR: FAIL,
    }[status]
    assert check.status is expected
    if status is NvmlStatus.OK:
        assert "550.54.15" in check.summary and "CUDA up to 12.4" in check.summary
    else:
        assert "detail" in check.summary and check.recommendation == state.hint


# -- driver against the build's CUDA ---------------------------------------------------------------


def driver_cuda(**changes):
    return only(doctor.check_driver_cuda(facts(**changes)))


def test_driver_supports_build_cuda_natively():
    check = driver_cuda(nvml=driver("555.42.02", 12050))
    assert check.status is OK and "12.5" in check.summary


def test_minor_version_compatibility_ok_when_all_gpus_native():
    check = driver_cuda(nvml=driver("525.60.13", 12000, 1), gpus=(A100,))
    assert check.status is OK and "minor-version compatibility" in check.summary


def test_minor_version_compatibility_warns_when_a_gpu_needs_ptx_jit():
    check = driver_cuda(nvml=driver("530.30.02", 12010))
    assert check.status is WARN and "[1]" in check.summary  # the H100, PTX only
    assert "CUDA 12.5" in check.recommendation


def test_driver_too_old_for_build_fails_with_the_minimum():
    check = driver_cuda(nvml=driver("470.82.01", 11040))
    assert check.status is FAIL and "525.60.13" in check.summary + check.recommendation
    cuda13 = driver_cuda(nvml=driver("575.51.03", 12090), tensorflow=tf(cuda_version="13.0"))
    assert cuda13.status is FAIL and "580" in cuda13.recommendation


def test_driver_cuda_unknown_major_and_skips():
    assert driver_cuda(nvml=driver("999.1", 14000),
                       tensorflow=tf(cuda_version="15.0")).status is WARN
    assert driver_cuda(nvml=make_state(NvmlStatus.LIBRARY_MISSING)).status is SKIP
    assert driver_cuda(tensorflow=tf(is_cuda_build=False)).status is SKIP
    assert driver_cuda(tensorflow=None).status is SKIP


# -- each GPU's architecture ---------------------------------------------------------------------


def test_gpu_arch_native_jit_unsupported():
    pascal = GpuInfo(2, "Tesla P4", "GPU-2", (6, 1), 8 << 30)
    maxwell = GpuInfo(3, "Tesla M60", "GPU-3", (5, 2), 8 << 30)
    checks = doctor.check_gpu_arch(facts(gpus=(A100, H100, pascal, maxwell)))
    assert [c.name for c in checks] == ["GPU 0 arch", "GPU 1 arch", "GPU 2 arch", "GPU 3 arch"]
    a100, h100, p4, m60 = checks
    assert a100.status is OK and "sm_80" in a100.summary and "bfloat16" in a100.summary
    assert "mixed_bfloat16" in a100.recommendation
    assert h100.status is WARN and "compute_90" in h100.summary
    assert "CUDA_CACHE_MAXSIZE" in h100.recommendation
    assert p4.status is OK and "no tensor cores" in p4.summary
    assert "float32" in p4.recommendation
    assert m60.status is FAIL and "5.2" in m60.summary


def test_gpu_arch_volta_float16_only_and_without_build():
    volta = GpuInfo(0, "Tesla V100", "GPU-0", (7, 0), 16 << 30)
    check = only(doctor.check_gpu_arch(facts(gpus=(volta,), tensorflow=None)))
    assert check.status is OK and "not checked" in check.summary
    assert "float16" in check.summary and "bfloat16" not in check.summary
    assert check.recommendation == "use mixed_float16"
    unknown = only(doctor.check_gpu_arch(facts(gpus=(dataclasses.replace(volta,
                                                                           compute_capability=None),))))
    assert unknown.status is WARN
    assert only(doctor.check_gpu_arch(facts(gpus=()))).status is SKIP


# -- TensorFlow sees the GPUs ----------------------------------------------------------------------


def sees(**changes):
    return only(doctor.check_tf_sees_gpus(facts(**changes)))


def test_tf_sees_all_gpus():
    assert sees().status is OK


def test_tf_sees_none_cpu_build_or_missing_libraries():
    cpu_build = sees(tensorflow=tf(visible_gpus=0, is_cuda_build=False))
    assert cpu_build.status is FAIL and "CPU-only" in cpu_build.summary
    no_libs = sees(tensorflow=tf(visible_gpus=0))
    assert no_libs.status is FAIL and "libraries" in no_libs.summary
    assert "TF_CPP_MIN_LOG_LEVEL=0" in no_libs.recommendation


def test_tf_sees_fewer_gpus():
    masked = sees(tensorflow=tf(visible_gpus=1), env={"CUDA_VISIBLE_DEVICES": "0"})
    assert masked.status is WARN and "CUDA_VISIBLE_DEVICES" in masked.summary
    partial = sees(tensorflow=tf(visible_gpus=1))
    assert partial.status is WARN and "1 of the 2" in partial.summary


def test_tf_sees_no_gpu_on_a_cpu_machine_and_skips():
    cpu_machine = sees(nvml=make_state(NvmlStatus.LIBRARY_MISSING), gpus=(),
                       tensorflow=tf(visible_gpus=0))
    assert cpu_machine.status is WARN and "CPU" in cpu_machine.summary
    assert sees(tensorflow=tf(visible_gpus=None, error="RuntimeError: x")).status is FAIL
    assert sees(tensorflow=TensorFlowInfo(installed=False)).status is SKIP
    other = sees(nvml=make_state(NvmlStatus.LIBRARY_MISSING), tensorflow=tf(visible_gpus=1))
    assert other.status is OK  # e.g. a GPU NVML cannot see in this container


# -- CPU, oneDNN, memory growth --------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags, words",
    [
        ({"avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}, "mixed_bfloat16 pays off"),
        ({"avx512f", "avx512_bf16"}, "mixed_bfloat16 pays off"),
        ({"avx512f"}, "keep float32"),
        ({"avx2"}, "keep float32"),
    ],
)
def test_cpu_check(flags, words):
    check = only(doctor.check_cpu(facts(cpu=CpuFeatures("X", "x86_64", frozenset(flags)))))
    assert check.status is OK and words in check.recommendation


def test_onednn():
    unset = only(doctor.check_onednn(facts()))
    assert unset.status is OK and "2.9" in unset.summary
    off = only(doctor.check_onednn(facts(env={"TF_ENABLE_ONEDNN_OPTS": "0"})))
    assert off.status is WARN and "unset" in off.recommendation
    assert only(doctor.check_onednn(facts(env={"TF_ENABLE_ONEDNN_OPTS": "1"}))).status is OK
    arm = only(doctor.check_onednn(facts(cpu=CpuFeatures(None, "aarch64", frozenset()))))
    assert "2.9" not in arm.summary


def test_memory_growth():
    off = only(doctor.check_memory_growth(facts()))
    assert off.status is OK and off.summary.startswith("off")
    assert "TF_FORCE_GPU_ALLOW_GROWTH=true" in off.recommendation
    on = only(doctor.check_memory_growth(facts(env={"TF_FORCE_GPU_ALLOW_GROWTH": "true"})))
    assert on.summary.startswith("on")
    by_api = only(doctor.check_memory_growth(facts(tensorflow=tf(memory_growth=(True, True)))))
    assert by_api.summary.startswith("on")
    bad = only(doctor.check_memory_growth(facts(env={"TF_FORCE_GPU_ALLOW_GROWTH": "yes"})))
    assert bad.status is WARN
    no_gpu = facts(nvml=make_state(NvmlStatus.NO_GPUS), gpus=())
    assert only(doctor.check_memory_growth(no_gpu)).status is SKIP


# -- the report ------------------------------------------------------------------------------------


def test_report_ok_counts_and_json():
    report = run_doctor(facts())
    assert report.ok  # the H100 needs JIT (WARN) but nothing fails
    counts = report.counts()
    assert counts["FAIL"] == 0 and counts["WARN"] >= 1 and sum(counts.values()) == len(
        report.checks)
    data = json.loads(json.dumps(report.to_dict()))
    assert data["ok"] is True and data["facts"]["gpus"][1]["compute_capability"] == "9.0"
    assert {c["status"] for c in data["checks"]} <= {"OK", "WARN", "FAIL", "SKIP"}
    failing = run_doctor(facts(python_version=(3, 8, 0)))
    assert not failing.ok


def test_run_doctor_gathers_through_fake_nvml_without_tensorflow():
    fake = make_fake_nvml([FakeGpu(name="NVIDIA L4", compute_capability=(8, 9))],
                          driver_version="535.104.05", cuda_version=12020)
    report = run_doctor(tensorflow=False, module=fake)
    by_name = {c.name: c for c in report.checks}
    assert by_name["NVIDIA driver"].status is OK and "535.104.05" in by_name["NVIDIA driver"].summary
    assert by_name["GPU 0 arch"].status is OK and "8.9" in by_name["GPU 0 arch"].summary
    assert by_name["TensorFlow"].status is SKIP
    assert fake.init_count == 0


def test_the_python_floor_is_setup_cfgs():
    import configparser
    from pathlib import Path

    config = configparser.ConfigParser()
    config.read(Path(__file__).resolve().parents[2] / "setup.cfg")
    floor = config["options"]["python_requires"].strip().removeprefix(">=")
    assert ".".join(map(str, doctor.MIN_PYTHON)) == floor
