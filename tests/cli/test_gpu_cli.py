"""``tfopt monitor`` and ``tfopt doctor`` through click's runner and as real subprocesses."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import tfopt.cli.gpu as gpu_cli
from tfopt.cli import cli
from tfopt.gpu.nvml import nvml_state
from tfopt.gpu.table import CSV_FIELDS
from tfopt.gpu.testing import FakeGpu, make_fake_nvml

REPO = Path(__file__).resolve().parents[2]
HAS_GPU = nvml_state().ok
no_gpu_here = pytest.mark.skipif(HAS_GPU, reason="this machine has a usable NVIDIA GPU")


@pytest.fixture
def fake_gpus(monkeypatch):
    """Two fake GPUs in sys.modules["pynvml"]: a busy A100 and a throttled, idle-ish V100."""
    module = make_fake_nvml([
        FakeGpu(name="NVIDIA A100-SXM4-40GB", gpu_util=97),
        FakeGpu(name="Tesla V100-SXM2-16GB", compute_capability=(7, 0), gpu_util=12,
                clock_reasons=0x4 | 0x40, unsupported=frozenset({"power_mw"})),
    ])
    monkeypatch.setitem(sys.modules, "pynvml", module)
    return module


def invoke(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


# -- monitor ---------------------------------------------------------------------------------------


@no_gpu_here
def test_monitor_without_gpu_exits_1_with_one_line(tmp_path):
    result = invoke("monitor", "--count", "1", "--csv", str(tmp_path / "m.csv"))
    assert result.exit_code == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfopt: error: ")
    assert "Hint:" in lines[0]
    assert not (tmp_path / "m.csv").exists()  # nothing written when nothing can be measured


def test_monitor_driver_version_mismatch_exits_1(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", make_fake_nvml([FakeGpu()], init_error=18))
    result = invoke("monitor", "--count", "1")
    assert result.exit_code == 1 and "version mismatch" in result.stderr


def test_monitor_count_prints_tables_with_marks(fake_gpus):
    result = invoke("monitor", "--count", "2", "-n", "0.01")
    assert result.exit_code == 0, result.stderr
    tables = result.stdout.strip().split("\n\n")
    assert len(tables) == 2
    for table in tables:
        lines = table.splitlines()
        assert "driver 550.54.15" in lines[0] and lines[1].startswith("GPU")
        a100, v100 = lines[2], lines[3]
        assert "NVIDIA A100" in a100 and "THROTTLE" not in a100 and "LOW-UTIL" not in a100
        assert "THROTTLE(sw_power_cap,hw_thermal)" in v100 and "LOW-UTIL(12%)" in v100
        assert "N/A" in v100  # power draw unsupported on that GPU
    assert fake_gpus.init_count == 0  # NVML shut down


def test_monitor_low_util_threshold_option(fake_gpus):
    result = invoke("monitor", "--count", "1", "--low-util", "99")
    a100 = result.stdout.splitlines()[2]
    assert "LOW-UTIL(97%)" in a100


def test_monitor_csv_appends_rows_with_one_header(fake_gpus, tmp_path):
    path = tmp_path / "gpu.csv"
    assert invoke("monitor", "--count", "2", "-n", "0.01", "--csv", str(path)).exit_code == 0
    assert invoke("monitor", "--count", "1", "--csv", str(path)).exit_code == 0
    with open(path, newline="") as file:
        rows = list(csv.DictReader(file))
    assert list(rows[0]) == list(CSV_FIELDS)
    assert len(rows) == 3 * 2  # 3 samples x 2 GPUs, one header
    assert [row["index"] for row in rows] == ["0", "1"] * 3
    v100 = rows[1]
    assert v100["name"] == "Tesla V100-SXM2-16GB" and v100["gpu_util"] == "12"
    assert v100["power_w"] == "" and v100["throttled"] == "True" and v100["low_util"] == "True"
    assert v100["clock_reasons"] == "sw_power_cap;hw_thermal"
    assert rows[0]["memory_total_mib"] == "40960" and rows[0]["timestamp"].endswith("+00:00")


def test_monitor_csv_refuses_a_file_with_other_columns(fake_gpus, tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    result = invoke("monitor", "--count", "1", "--csv", str(path))
    assert result.exit_code == 1 and "--csv" in result.stderr and "other columns" in result.stderr
    assert path.read_text() == "a,b\n1,2\n"


def test_monitor_jsonl(fake_gpus, tmp_path):
    path = tmp_path / "gpu.jsonl"
    result = invoke("monitor", "--count", "3", "-n", "0.01", "--jsonl", str(path))
    assert result.exit_code == 0
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == 6
    assert set(records[0]) == set(CSV_FIELDS)
    assert records[1]["power_w"] is None and records[1]["clock_reasons"] == ["sw_power_cap",
                                                                             "hw_thermal"]
    assert records[0]["gpu_util"] == 97 and records[0]["throttled"] is False
    stamps = [r["timestamp"] for r in records[::2]]
    assert stamps == sorted(stamps)


def test_monitor_ctrl_c_exits_0_and_rows_are_on_disk_before_it(fake_gpus, tmp_path,
                                                              monkeypatch):
    csv_path, jsonl_path = tmp_path / "gpu.csv", tmp_path / "gpu.jsonl"
    seen_during_wait = {}

    def interrupted(seconds):
        # Read the files while monitor still holds them open: each sample must be flushed.
        seen_during_wait["csv"] = csv_path.read_text().splitlines()
        seen_during_wait["jsonl"] = jsonl_path.read_text().splitlines()
        raise KeyboardInterrupt  # what Ctrl-C raises in the wait

    monkeypatch.setattr(gpu_cli, "_sleep", interrupted)
    result = invoke("monitor", "--csv", str(csv_path), "--jsonl", str(jsonl_path))
    assert result.exit_code == 0
    assert "stopped after 1 sample" in result.stderr
    assert len(seen_during_wait["csv"]) == 1 + 2  # header + 2 GPUs
    assert len(seen_during_wait["jsonl"]) == 2
    assert len(jsonl_path.read_text().splitlines()) == 2
    assert fake_gpus.init_count == 0


HOPPER_GPM = {"sm_active": [61.5, 80.0], "sm_occupancy": 33.25, "tensor_active": 47.0,
              "dram_bw_util": 12.5}


@pytest.fixture
def gpm_gpus(monkeypatch):
    """A fake H100 with GPM counters beside a fake A100, which has none."""
    module = make_fake_nvml([
        FakeGpu(name="NVIDIA H100 80GB HBM3", compute_capability=(9, 0), gpm=HOPPER_GPM),
        FakeGpu(name="NVIDIA A100-SXM4-40GB"),
    ])
    monkeypatch.setitem(sys.modules, "pynvml", module)
    return module


def test_monitor_json_gives_the_four_gpm_counters_and_a_not_supported_marker(gpm_gpus):
    # -n above NVML's 100 ms between GPM samples; the first line has counters too (monitor
    # takes the first GPM sample one interval before it)
    result = invoke("monitor", "--count", "2", "-n", "0.15", "--json")
    assert result.exit_code == 0, result.stderr
    samples = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(samples) == 2 and samples[0]["driver_version"] == "550.54.15"
    for sample, sm_active in zip(samples, (61.5, 80.0), strict=True):
        hopper, ampere = sample["gpus"]
        assert set(hopper) == set(CSV_FIELDS)
        assert (hopper["sm_active"], hopper["sm_occupancy"], hopper["tensor_active"],
                hopper["dram_bw_util"]) == (sm_active, 33.2, 47.0, 12.5)
        assert hopper["gpm"] == {"supported": True, "reason": None}
        assert all(ampere[name] is None for name in ("sm_active", "sm_occupancy",
                                                     "tensor_active", "dram_bw_util"))
        assert ampere["gpm"]["supported"] is False and "no GPM" in ampere["gpm"]["reason"]
    assert gpm_gpus.gpm_buffers == 0 and gpm_gpus.init_count == 0


def test_monitor_table_says_n_s_for_a_gpu_without_gpm_and_what_kernel_means(gpm_gpus, tmp_path):
    path = tmp_path / "gpu.csv"
    result = invoke("monitor", "--count", "1", "-n", "0.15", "--csv", str(path))
    assert result.exit_code == 0, result.stderr
    header, hopper, ampere = result.stdout.splitlines()[1:4]
    assert header.split()[2:8] == ["Kernel", "MemU", "SMAct", "SMOcc", "Tensor", "DRAM"]
    assert hopper.split()[5:11] == ["97%", "40%", "62%", "33%", "47%", "12%"]
    assert ampere.split()[3:9] == ["97%", "40%", "n/s", "n/s", "n/s", "n/s"]
    with open(path, newline="") as file:
        rows = list(csv.DictReader(file))
    assert rows[0]["sm_active"] == "61.5" and rows[0]["gpm"] == "supported"
    assert rows[1]["sm_active"] == "" and rows[1]["gpm"].startswith("not supported: ")
    help_text = invoke("monitor", "--help").stdout
    assert "the share of time a kernel was running" in " ".join(help_text.split())


def test_monitor_json_on_a_gpu_without_gpm_never_gives_a_zero(fake_gpus):
    result = invoke("monitor", "--count", "2", "-n", "0.01", "--json")
    for sample in map(json.loads, result.stdout.splitlines()):
        for gpu in sample["gpus"]:
            assert gpu["sm_active"] is None and gpu["tensor_active"] is None
            assert gpu["gpm"]["supported"] is False


@no_gpu_here
def test_monitor_json_without_gpu_gives_the_error_as_json():
    result = invoke("monitor", "--count", "1", "--json")
    assert result.exit_code == 1
    error = json.loads(result.stdout)
    assert error["exit_code"] == 1 and "NVML" in error["error"]


@pytest.mark.parametrize("args", [["-n", "0"], ["-n", "-1"], ["--count", "0"],
                                  ["--low-util", "101"]])
def test_monitor_usage_errors_exit_2(args):
    assert invoke("monitor", *args).exit_code == 2


# -- doctor ----------------------------------------------------------------------------------------


def test_doctor_json_without_tensorflow(fake_gpus, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # as if not installed
    result = invoke("doctor", "--json")
    report = json.loads(result.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["TensorFlow"]["status"] == "WARN"
    assert "not installed" in checks["TensorFlow"]["summary"]
    assert checks["NVIDIA driver"]["status"] == "OK"
    assert checks["GPU 1 arch"]["summary"].startswith("Tesla V100")
    assert report["facts"]["tensorflow"]["installed"] is False
    assert result.exit_code == (0 if report["ok"] else 1)
    assert report["ok"] is True


def test_doctor_fails_with_exit_1_on_version_mismatch(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", make_fake_nvml([FakeGpu()], init_error=18))
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    result = invoke("doctor")
    assert result.exit_code == 1
    line = next(line for line in result.stdout.splitlines() if "NVIDIA driver" in line)
    assert line.startswith("FAIL") and "version mismatch" in line
    assert "-> reboot" in result.stdout
    assert "1 FAIL" in result.stdout.strip().splitlines()[-1]


# -- real subprocesses -----------------------------------------------------------------------------


def run_python(code, timeout=120, **kwargs):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env=env, **kwargs)


def test_monitor_starts_without_tensorflow_subprocess():
    code = (
        "import sys\n"
        "from tfopt.gpu.testing import FakeGpu, make_fake_nvml\n"
        "sys.modules['pynvml'] = make_fake_nvml([FakeGpu()])\n"
        "from tfopt.cli import cli\n"
        "code = cli(['monitor', '--count', '1'], standalone_mode=False)\n"
        "print('EXIT', code, 'TF', 'tensorflow' in sys.modules)\n"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert "NVIDIA A100" in result.stdout
    assert "EXIT None TF False" in result.stdout


def test_monitor_json_with_gpm_subprocess():
    code = (
        "import sys\n"
        "from tfopt.gpu.testing import FakeGpu, make_fake_nvml\n"
        "sys.modules['pynvml'] = make_fake_nvml([\n"
        "    FakeGpu(name='NVIDIA H100 80GB HBM3', compute_capability=(9, 0),\n"
        "            gpm={'sm_active': 70.0, 'sm_occupancy': 25.0, 'tensor_active': 55.5,\n"
        "                 'dram_bw_util': 30.0}),\n"
        "    FakeGpu(name='Tesla V100-SXM2-16GB', compute_capability=(7, 0))])\n"
        "from tfopt.cli import main\n"
        "sys.argv = ['tfopt', 'monitor', '--count', '1', '-n', '0.15', '--json']\n"
        "main()\n"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    hopper, volta = json.loads(result.stdout)["gpus"]
    assert [hopper[k] for k in ("sm_active", "sm_occupancy", "tensor_active",
                                "dram_bw_util")] == [70.0, 25.0, 55.5, 30.0]
    assert volta["sm_active"] is None and volta["gpm"]["supported"] is False


@no_gpu_here
def test_real_monitor_without_gpu_subprocess():
    code = (
        "import sys\n"
        "from tfopt.cli import main\n"
        "sys.argv = ['tfopt', 'monitor', '--count', '1']\n"
        "try:\n    main()\n"
        "except SystemExit as exit:\n"
        "    print('EXIT', exit.code, 'TF', 'tensorflow' in sys.modules)\n"
    )
    result = run_python(code)
    assert "EXIT 1 TF False" in result.stdout
    errors = [line for line in result.stderr.splitlines() if line.startswith("tfopt:")]
    assert len(errors) == 1 and "NVML" in errors[0]


def test_monitor_sigint_exits_0_subprocess():
    # A shell starts background jobs with SIGINT ignored, and Python then installs no
    # KeyboardInterrupt handler; restore it, as an interactive terminal would have it.
    code = (
        "import signal, sys\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from tfopt.gpu.testing import FakeGpu, make_fake_nvml\n"
        "sys.modules['pynvml'] = make_fake_nvml([FakeGpu()])\n"
        "from tfopt.cli import main\n"
        "sys.argv = ['tfopt', 'monitor', '-n', '0.05']\n"
        "main()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
    try:
        first = proc.stdout.readline()  # the table's title line: the loop is running
        assert first.strip()
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert "monitor stopped after" in stderr


def test_doctor_runs_without_tensorflow_installed_subprocess():
    code = (
        "import sys\n"
        "sys.modules['tensorflow'] = None\n"  # as if not installed
        "from tfopt.cli import main\n"
        "sys.argv = ['tfopt', 'doctor', '--json']\n"
        "main()\n"
    )
    result = run_python(code)
    report = json.loads(result.stdout)
    assert result.returncode == (0 if report["ok"] else 1)
    tf_check = next(c for c in report["checks"] if c["name"] == "TensorFlow")
    assert tf_check["status"] == "WARN" and "not installed" in tf_check["summary"]


def test_real_doctor_json_subprocess():
    result = subprocess.run([sys.executable, "-m", "tfopt", "doctor", "--json"],
                            capture_output=True, text=True, timeout=180, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    report = json.loads(result.stdout)
    assert result.returncode == (0 if report["ok"] else 1)
    names = [c["name"] for c in report["checks"]]
    for name in ("Python", "TensorFlow", "Keras", "TF build", "NVIDIA driver", "TF sees GPUs",
                 "CPU", "oneDNN"):
        assert name in names
    tf_facts = report["facts"]["tensorflow"]
    assert tf_facts["installed"] and tf_facts["importable"] and tf_facts["version"]
    if not HAS_GPU:
        checks = {c["name"]: c for c in report["checks"]}
        assert checks["NVIDIA driver"]["status"] in ("WARN", "FAIL")
        assert tf_facts["visible_gpus"] == 0
        assert checks["TF sees GPUs"]["status"] == "WARN"


@pytest.mark.parametrize("value", ["inf", "nan", "0", "-1"])
def test_monitor_interval_must_be_a_positive_finite_number(value):
    result = invoke("monitor", "-n", value, "--count", "1")
    assert result.exit_code == 2
    assert "'-n' / '--interval'" in result.output
