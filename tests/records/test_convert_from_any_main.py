"""make_demo_data and convert from any main module (tfopt/_spawn.worker_context): a script
without an ``if __name__ == "__main__":`` guard, ``python -`` (the script on stdin),
``python -c``, ``python -m`` and a Jupyter-like ``__main__`` (no ``__file__``). Their worker
processes do not import the caller's main module again, which would run the work again in each
of them (multiprocessing's RuntimeError, then BrokenProcessPool), or fail to find the file
("<stdin>"). Where workers cannot start, one line says what to do.

Real processes: each case runs a user's script in a fresh interpreter, with worker pools of 2.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tfopt
from tfopt.records.manifest import MANIFEST_NAME, read_manifest

# A user's script, as it would be written without thinking of multiprocessing: no main guard.
# 60 images are two of demo-data's tasks (50 images each), so both pools start processes.
SCRIPT = textwrap.dedent("""\
    import sys
    from pathlib import Path

    import tfopt

    work = Path(sys.argv[1])
    demo = tfopt.make_demo_data(work / "images", count=60, classes=2, min_size=16, max_size=24,
                                workers=2)
    result = tfopt.convert(work / "images", work / "shards", workers=2, shards=4)
    print("made", demo.num_images, "converted", result.num_records)
    """)

# A notebook kernel's __main__: a module made at run time, with no __file__ and no __spec__
# (IPython's user module); the cells run in its namespace
JUPYTER_LIKE = textwrap.dedent("""\
    import sys, types

    kernel_main = types.ModuleType("__main__", "Automatically created module for IPython")
    sys.modules["__main__"] = kernel_main
    exec(compile(sys.stdin.read(), "<ipython-input-1>", "exec"), kernel_main.__dict__)
    """)


def _run(command: list[str], cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(command, input=stdin, capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def _assert_made_and_converted(done: subprocess.CompletedProcess, work: Path) -> None:
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    # printed once: no worker ran the script again
    assert done.stdout.splitlines() == ["made 60 converted 60"], done.stdout
    check = tfopt.verify(work / "shards")
    assert check.ok, check.problems
    assert read_manifest(work / "shards").splits["train"].num_records == 60
    assert len(list((work / "images").glob("*/*.jpg"))) == 60


@pytest.mark.parametrize("how", ["script file", "stdin", "-c", "-m", "jupyter-like"])
def test_demo_data_and_convert_run_from_a_main_module_without_a_guard(tmp_path, how):
    work = tmp_path / "work"
    stdin = None
    if how == "script file":
        (tmp_path / "train.py").write_text(SCRIPT)
        command = [sys.executable, str(tmp_path / "train.py"), str(work)]
    elif how == "stdin":  # python - < train.py: __file__ is "<stdin>", no file to import
        command, stdin = [sys.executable, "-", str(work)], SCRIPT
    elif how == "-c":
        command = [sys.executable, "-c", SCRIPT, str(work)]
    elif how == "-m":  # __spec__ names the module: a child would run_module it again
        (tmp_path / "train_module.py").write_text(SCRIPT)
        command = [sys.executable, "-m", "train_module", str(work)]
    else:
        command, stdin = [sys.executable, "-c", JUPYTER_LIKE, str(work)], SCRIPT
    _assert_made_and_converted(_run(command, tmp_path, stdin), work)


# An interpreter that cannot start pool workers: it runs Python, except for a worker's
# start-up command (multiprocessing's spawn_main), where it fails as a broken embedded
# interpreter or a missing library would. The resource tracker still starts.
BROKEN_WORKER_PYTHON = """\
#!/bin/sh
case "$*" in
  *spawn_main*) echo "this interpreter cannot run worker processes" >&2; exit 3 ;;
esac
exec {python} "$@"
"""

CLI_WITH_BROKEN_WORKERS = textwrap.dedent("""\
    import multiprocessing, runpy, sys

    multiprocessing.set_executable(sys.argv.pop(1))
    runpy.run_module("tfopt", run_name="__main__", alter_sys=True)
    """)


@pytest.fixture
def broken_worker_python(tmp_path) -> Path:
    path = tmp_path / "python-without-workers"
    path.write_text(BROKEN_WORKER_PYTHON.format(python=sys.executable))
    path.chmod(0o755)
    return path


def _assert_one_line_says_what_to_do(done: subprocess.CompletedProcess, advice: str) -> str:
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "BrokenProcessPool" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("tfopt: error: ") and "worker processes" in last, done.stderr
    assert advice in last, last
    return last


def test_convert_says_what_to_do_where_workers_cannot_start(tmp_path, broken_worker_python):
    from conftest import make_image_folder

    images = make_image_folder(tmp_path / "images", per_class=4)
    out = tmp_path / "out"
    done = _run([sys.executable, "-c", CLI_WITH_BROKEN_WORKERS, str(broken_worker_python),
                 "convert", str(images), str(out), "--workers", "2", "--shards", "6", "-q"],
                tmp_path)
    _assert_one_line_says_what_to_do(done, "--resume --workers 1")
    # as the line says: the finished shards are kept, and the rest is written in-process
    resumed = _run([sys.executable, "-m", "tfopt", "convert", str(images), str(out),
                    "--workers", "1", "--shards", "6", "--resume", "-q"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert tfopt.verify(out).ok
    written = [shard.file for shard in read_manifest(out).shards] + [MANIFEST_NAME]
    assert sorted(os.listdir(out)) == sorted(written)  # no journal, no temporary file


def test_demo_data_says_what_to_do_where_workers_cannot_start(tmp_path, broken_worker_python):
    dst = tmp_path / "demo"
    done = _run([sys.executable, "-c", CLI_WITH_BROKEN_WORKERS, str(broken_worker_python),
                 "demo-data", str(dst), "--count", "60", "--classes", "2", "--min-size", "16",
                 "--max-size", "16", "--workers", "2", "-q"], tmp_path)
    _assert_one_line_says_what_to_do(done, "--workers 1")
    # nothing is left: no folder under the name, no temporary one beside it
    assert os.listdir(tmp_path) == [broken_worker_python.name]
