"""tfopt launch with real worker processes: short Python one-liners, not TensorFlow."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from click.testing import CliRunner

from tfopt.cli.launch import launch
from tfopt.distribute.cluster import cluster_tf_configs, free_port_count
from tfopt.distribute.launch import launch_workers
from tfopt.errors import InvalidArgumentError, WorkerStartError

PY = sys.executable

# Each worker reads its own TF_CONFIG; INDEX and CONFIG are ready for the snippet after it.
PRELUDE = "import json, os, sys, time; CONFIG = json.loads(os.environ['TF_CONFIG']); " \
          "INDEX = CONFIG['task']['index']; "


def worker(code: str) -> list[str]:
    return [PY, "-c", PRELUDE + code]


def run(args):
    # CliRunner mixes stderr into output; the launcher's own messages go there too
    return CliRunner().invoke(launch, args, catch_exceptions=False)


def lines_of(worker_index: int, output: str) -> list[str]:
    prefix = f"[worker {worker_index}] "
    return [line[len(prefix):] for line in output.splitlines() if line.startswith(prefix)]


def is_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as status:
            return any(line.split()[1] == "Z" for line in status if line.startswith("State:"))
    except FileNotFoundError:
        return True


# -- --print-tf-config --------------------------------------------------------------------------------


def test_print_tf_config_prints_one_json_object_per_worker():
    result = run(["--print-tf-config", "--hosts", "node1:2222,node2:2223"])
    assert result.exit_code == 0
    configs = [json.loads(line) for line in result.output.splitlines()]
    assert [c["task"] for c in configs] == [{"type": "worker", "index": 0},
                                            {"type": "worker", "index": 1}]
    assert configs[0]["cluster"] == configs[1]["cluster"] == {
        "worker": ["node1:2222", "node2:2223"]}

    local = run(["--print-tf-config", "-n", "3"])
    configs = [json.loads(line) for line in local.output.splitlines()]
    assert len(configs) == 3 and len(set(configs[0]["cluster"]["worker"])) == 3
    assert all(a.startswith("localhost:") for a in configs[0]["cluster"]["worker"])


@pytest.mark.parametrize("args, message", [
    (["--print-tf-config"], "needs -n"),
    (["--print-tf-config", "-n", "2", "python", "x.py"], "starts nothing"),
    (["--hosts", "a:1,b:2", "python", "x.py"], "local workers only"),
    (["-n", "2"], "give the command"),
    (["python", "x.py"], "number of workers"),
    (["-n", "0", "python", "x.py"], "0"),
])
def test_usage_errors(args, message):
    result = CliRunner().invoke(launch, args)
    assert result.exit_code == 2 and message in result.output


def test_launch_does_not_import_tensorflow():
    code = ("import sys; from click.testing import CliRunner; from tfopt.cli.launch import "
            "launch; r = CliRunner().invoke(launch, ['-n', '1', sys.executable, '-c', 'pass']);"
            " assert r.exit_code == 0, r.output; assert 'tensorflow' not in sys.modules")
    subprocess.run([PY, "-c", code], check=True, timeout=60)


# -- real workers ---------------------------------------------------------------------------


def test_each_worker_gets_its_index_and_the_same_cluster_and_prefixed_output():
    result = run(["-n", "3", "--", *worker(
        "print(json.dumps(CONFIG)); print('note from', INDEX, file=sys.stderr)")])
    assert result.exit_code == 0, result.output
    # stdout and stderr are separate pipes: their lines may interleave either way
    configs = [json.loads(next(line for line in lines_of(i, result.output)
                               if line.startswith("{"))) for i in range(3)]
    assert sorted(c["task"]["index"] for c in configs) == [0, 1, 2]
    assert [c["task"]["index"] for c in configs] == [0, 1, 2]  # [worker i] is task i
    clusters = {json.dumps(c["cluster"]) for c in configs}
    assert len(clusters) == 1
    addresses = configs[0]["cluster"]["worker"]
    assert len(set(addresses)) == 3 and all(a.startswith("localhost:") for a in addresses)
    for index in range(3):
        assert f"note from {index}" in lines_of(index, result.output)


def test_options_after_the_command_belong_to_the_command():
    result = run(["-n", "1", *worker("print(sys.argv[1:])"), "--epochs", "3", "-n", "7"])
    assert result.exit_code == 0, result.output
    assert lines_of(0, result.output) == ["['--epochs', '3', '-n', '7']"]


def test_lines_stream_as_printed_not_at_exit():
    seen = []
    started = time.monotonic()

    def on_line(index, stream, line):
        seen.append((line, time.monotonic() - started))

    # no flush in the worker: PYTHONUNBUFFERED must make the line arrive before the sleep ends
    result = launch_workers(worker("print('early'); time.sleep(2); print('late')"), 1,
                            on_line=on_line)
    assert result.exit_code == 0
    (early, t_early), (late, t_late) = seen
    assert (early, late) == ("early", "late") and t_late - t_early > 1.5


def test_first_failure_stops_the_others_and_sets_the_exit_code(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    code = (f"open(os.path.join({str(pids)!r}, str(INDEX)), 'w').write(str(os.getpid())); "
            "print('ready', flush=True); "
            "time.sleep(0.5) if INDEX == 1 else time.sleep(60); sys.exit(3)")
    started = time.monotonic()
    result = run(["-n", "2", "--grace", "5", *worker(code)])
    elapsed = time.monotonic() - started
    assert result.exit_code == 3, result.output
    assert "worker 1 failed with exit code 3" in result.output
    assert elapsed < 10  # the sleeping worker was terminated, not waited for (60 s)
    assert all(is_gone(int((pids / name).read_text())) for name in ("0", "1"))


def test_a_worker_that_ignores_sigterm_is_killed_after_the_grace_period():
    code = ("import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(0.3 if INDEX else 60); sys.exit(INDEX * 5)")
    started = time.monotonic()
    result = launch_workers(worker(code), 2, grace_seconds=1)
    assert (result.exit_code, result.failed_worker) == (5, 1)
    assert time.monotonic() - started < 8


def test_a_worker_killed_by_a_signal_exits_128_plus_the_signal():
    result = launch_workers(worker("os.kill(os.getpid(), 9) if INDEX else None"), 2)
    assert (result.exit_code, result.failed_worker) == (128 + 9, 1)


def test_a_port_clash_relaunches_on_new_ports(tmp_path):
    marker = tmp_path / "first-attempt-done"
    # the first launch fails as a TensorFlow server does when its port is taken
    code = (f"m = {str(marker)!r}; "
            "first = not os.path.exists(m); "
            "open(m, 'a').close() if INDEX == 0 else time.sleep(0.2); "
            "print('Could not start gRPC server: Address already in use', file=sys.stderr) "
            "if first and INDEX == 0 else None; "
            "sys.exit(1 if first and INDEX == 0 else 0)")
    lines = []
    result = launch_workers(worker(code), 2, on_line=lambda i, s, line: lines.append(line),
                            grace_seconds=2)
    assert (result.exit_code, result.attempts) == (0, 2)
    assert any("Address already in use" in line for line in lines)


def test_a_port_clash_on_the_last_attempt_is_a_failure():
    code = "print('Address already in use', file=sys.stderr); sys.exit(1)"
    result = launch_workers(worker(code), 1, attempts=2)
    assert (result.exit_code, result.attempts) == (1, 2)


def env_level(**kwargs):
    """The TF_CPP_MIN_LOG_LEVEL each of two workers got (None: unset)."""
    lines = []
    result = launch_workers(worker("print(os.environ.get('TF_CPP_MIN_LOG_LEVEL'))"), 2,
                            on_line=lambda i, s, line: lines.append(line), **kwargs)
    assert result.exit_code == 0, lines
    return sorted(lines)


def test_workers_get_tf_cpp_min_log_level_1_unless_it_is_set(monkeypatch):
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    assert env_level() == ["1", "1"]
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")  # the user's value wins
    assert env_level() == ["0", "0"]
    assert env_level(env={"PATH": "/usr/bin:/bin", "TF_CPP_MIN_LOG_LEVEL": "3"}) == ["3", "3"]
    assert env_level(env={"PATH": "/usr/bin:/bin"}) == ["1", "1"]
    # left as it is when asked for TensorFlow's own output
    assert env_level(env={"PATH": "/usr/bin:/bin"}, quiet_tensorflow=False) == ["None", "None"]


# What a TensorFlow worker writes to stderr before and after it reads TF_CPP_MIN_LOG_LEVEL
# (absl's C++ format, and TensorFlow's older own), with lines that are not TensorFlow's.
NOTICE_AND_INFO = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1796134142.057280   14344 port.cc:153] oneDNN custom operations are on.",
    "I0000 00:00:1796134142.057728   14344 cudart_stub.cc:31] Could not find cuda drivers",
    "2024-05-01 12:00:00.123456: I tensorflow/core/platform/cpu_feature_guard.cc:182] AVX2",
]
WARNINGS = [
    "W0000 00:00:1796134165.789892   14344 dataset.cc:997] Input of GeneratorDatasetOp::Dataset",
]
ERRORS = [
    "E0000 00:00:1796134152.460176   14409 cuda_platform.cc:52] failed call to cuInit",
    "2024-05-01 12:00:01.000000: E tensorflow/core/common_runtime/executor.cc:9] op failed",
    "F0000 00:00:1796134152.460176   14409 check.cc:12] Check failed: x == y",
]
NOT_TF = [
    "I0501 12:00:00.123456 140234 train_lib.py:42] step 100, loss 0.5",  # absl's Python logging
    "Traceback (most recent call last):",
    "ValueError: a real error",
]
TF_STDERR = NOTICE_AND_INFO + WARNINGS + ERRORS + NOT_TF
PRINT_TF_STDERR = f"[print(line, file=sys.stderr) for line in {TF_STDERR!r}]; "


def shown(env_value=None, **kwargs):
    """The stderr lines handed on from a worker that prints TF_STDERR (and a TensorFlow INFO
    line on stdout, which is never held back) and fails."""
    code = PRINT_TF_STDERR + f"print({NOTICE_AND_INFO[1]!r}); sys.exit(1)"
    env = {"PATH": "/usr/bin:/bin"}
    if env_value is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = env_value
    lines = []
    result = launch_workers(worker(code), 1, env=env, attempts=1,
                            on_line=lambda i, stream, line: lines.append((stream, line)),
                            **kwargs)
    assert result.exit_code == 1
    assert ("stdout", NOTICE_AND_INFO[1]) in lines
    return [line for stream, line in lines if stream == "stderr"]


def test_tensorflow_info_lines_are_held_back_and_errors_always_pass():
    assert shown() == WARNINGS + ERRORS + NOT_TF  # level 1, the launcher's default
    assert shown("2") == ERRORS + NOT_TF  # the user's level: warnings go too
    assert shown("3") == ERRORS + NOT_TF  # errors are never held back
    assert shown("0") == TF_STDERR
    assert shown("not a number") == TF_STDERR  # TensorFlow reads it as 0
    assert shown(quiet_tensorflow=False) == TF_STDERR


def test_tfopt_vv_launch_shows_every_line(monkeypatch):
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    code = "print(os.environ.get('TF_CPP_MIN_LOG_LEVEL')); " + PRINT_TF_STDERR

    def launched(*options):
        done = subprocess.run([PY, "-m", "tfopt", *options, "launch", "-n", "1", *worker(code)],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return lines_of(0, done.stdout), lines_of(0, done.stderr)

    assert launched() == (["1"], WARNINGS + ERRORS + NOT_TF)
    assert launched("-vv") == (["None"], TF_STDERR)


def test_a_missing_program_is_a_clear_error():
    with pytest.raises(InvalidArgumentError, match="cannot start"):
        launch_workers(["no-such-program-tfopt"], 2)


LAUNCHER = textwrap.dedent("""
    import signal, sys
    # a background job starts with SIGINT ignored, and the launcher keeps an ignored SIGINT
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    from tfopt.cli.launch import launch
    launch(sys.argv[1:], prog_name="tfopt launch")
""")


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_stops_every_worker_and_exits_128_plus_the_signal(tmp_path, signum, code):
    # the worker reports its pid and waits; on SIGINT Python raises KeyboardInterrupt
    body = "print('pid', os.getpid(), flush=True); time.sleep(60)"
    launcher = subprocess.Popen([PY, "-c", LAUNCHER, "-n", "2", "--grace", "5", *worker(body)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pids = {}
        deadline = time.monotonic() + 30
        while len(pids) < 2 and time.monotonic() < deadline:
            line = launcher.stdout.readline()
            if line.startswith("[worker") and " pid " in line:
                pids[line.split("]")[0]] = int(line.split()[-1])
        assert len(pids) == 2, launcher.stderr.read()
        launcher.send_signal(signum)
        assert launcher.wait(timeout=15) == code
        assert all(is_gone(pid) for pid in pids.values())
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"workers": True}, "workers=True: expected an integer >= 1"),
    ({"workers": 2.0}, "workers=2.0: expected an integer >= 1"),
    ({"attempts": 0}, "attempts=0: expected an integer >= 1"),
    ({"grace_seconds": "5"}, "grace_seconds='5'"),
    ({"quiet_tensorflow": "yes"}, "quiet_tensorflow='yes': expected True or False"),
])
def test_bad_arguments_are_named_before_anything_starts(kwargs, match):
    arguments = {"workers": 2, **kwargs}
    with pytest.raises(InvalidArgumentError, match=match):
        launch_workers([sys.executable, "-c", "pass"], arguments.pop("workers"), **arguments)


# -- more workers than the machine can start ----------------------------------------------------


def test_more_workers_than_ports_exist_are_refused_before_any_starts(tmp_path):
    # 100000 exceeds every machine's ports (and here the open files too): one error naming
    # the limit, not 26 s of starts ending in "Too many open files"
    marker = tmp_path / "started"
    with pytest.raises(WorkerStartError, match=r"^workers=100000: expected at most \d+ here: "):
        launch_workers(worker(f"open({str(marker)!r}, 'a').close()"), 100000)
    assert not marker.exists()
    with pytest.raises(InvalidArgumentError, match=r"^workers=100000: expected at most"):
        cluster_tf_configs(workers=100000)


def test_the_open_file_limit_bounds_the_workers_and_the_error_says_what_to_do(tmp_path):
    # a launcher whose soft open-file limit is 128 has room for (128 - open - 32) // 2 workers
    marker = tmp_path / "started"
    code = textwrap.dedent(f"""
        import resource, sys
        from tfopt.errors import WorkerStartError
        from tfopt.distribute.launch import launch_workers
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, hard))
        try:
            launch_workers([sys.executable, "-c", "open({str(marker)!r}, 'a').close()"], 60)
        except WorkerStartError as error:
            print(error)
    """)
    done = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("workers=60: expected at most ")
    assert "each worker holds 2 open files in this process and the open-file limit " \
           "(ulimit -n) is 128" in done.stdout
    assert "raise it: ulimit -n " in done.stdout
    assert not marker.exists()


def test_free_port_count_reads_the_ephemeral_range():
    counted = free_port_count()
    if not sys.platform.startswith("linux"):
        assert counted is None
        return
    ports, where = counted
    low, high = (int(part) for part in where.split()[1].rstrip(",").split("-"))
    assert 0 < ports <= high - low + 1 and where.startswith("net.ipv4.ip_local_port_range")


# -- a worker's own children do not outlive the job ----------------------------------------------


# Worker code: start a grandchild that ignores SIGTERM and writes its pid to PIDS/g<INDEX>
# (once it ignores it), wait for that, then end as END says.
def leaves_a_grandchild(pids, end: str) -> list[str]:
    grandchild = ("import os, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                  "open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid())); "
                  "os.replace(sys.argv[1] + '.tmp', sys.argv[1]); time.sleep(60)")
    return worker(
        "import subprocess; "
        f"path = os.path.join({str(pids)!r}, 'g' + str(INDEX)); "
        f"subprocess.Popen([sys.executable, '-c', {grandchild!r}, path]); "
        "[time.sleep(0.02) for _ in range(3000) if not os.path.exists(path)]; "
        f"{end}")


def grandchildren(pids, count: int) -> list[int]:
    return [int((pids / f"g{index}").read_text()) for index in range(count)]


@pytest.mark.parametrize("end, code", [("sys.exit(0)", 0), ("sys.exit(3 * INDEX)", 3)])
def test_a_grandchild_that_ignores_sigterm_is_killed_when_the_job_ends(tmp_path, end, code):
    pids = tmp_path / "pids"
    pids.mkdir()
    result = launch_workers(leaves_a_grandchild(pids, end), 2, grace_seconds=0.5)
    assert result.exit_code == code
    left = [pid for pid in grandchildren(pids, 2) if not is_gone(pid)]
    assert left == [], f"grandchildren {left} outlived the job"
