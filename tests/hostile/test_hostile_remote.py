"""A second location whose S3 endpoint takes connections and never answers, met by real
processes: ``tfopt.Run`` (which lists the copy when it is made) and ``tfopt backups`` give up
after the remote deadline with one warning, instead of waiting out the file system's retries
for minutes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

pytest.importorskip("s3fs", reason="s3fs is not installed (pip install 'tfopt[remote]')")

from tfopt.train.backup_store import REMOTE_DEADLINE_VARIABLE  # noqa: E402

# the deadline under test, set through the environment as a user on a slow link would (the
# default, 30 s, would hold this test for two minutes)
REMOTE_DEADLINE_S = 6.0


@pytest.fixture()
def silent_endpoint():
    """http://127.0.0.1:PORT: accepts every connection, reads, never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held, stop = [], threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for connection in held:
            connection.close()
        server.close()


def env_for(endpoint):
    return {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint,
            "FSSPEC_S3_ENDPOINT_URL": endpoint, REMOTE_DEADLINE_VARIABLE: str(REMOTE_DEADLINE_S)}


RUN = textwrap.dedent("""
    import sys, time
    import numpy as np
    import tfopt
    started = time.monotonic()
    run = tfopt.Run((np.zeros((32, 4), "float32"), np.zeros(32, "float32")), batch_size=8,
                    validation=None, workdir=sys.argv[1], copy_to="s3://bucket/run")
    print("MADE", time.monotonic() - started, flush=True)
""")


@pytest.mark.slow
def test_run_and_backups_give_up_on_a_silent_copy_within_the_deadline(tmp_path, silent_endpoint):
    script = tmp_path / "run.py"
    script.write_text(RUN)
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "work")],
                          env=env_for(silent_endpoint), capture_output=True, text=True,
                          timeout=REMOTE_DEADLINE_S * 4 + 120)
    assert done.returncode == 0, done.stderr[-3000:]
    made = float(done.stdout.split("MADE")[1])
    assert REMOTE_DEADLINE_S * 0.9 < made < REMOTE_DEADLINE_S * 2 + 10, made
    warnings = [line for line in done.stderr.splitlines() if "no answer within" in line]
    assert len(warnings) == 1, done.stderr[-3000:]

    listed = subprocess.run([sys.executable, "-m", "tfopt", "backups", str(tmp_path / "work"),
                             "--copy-to", "s3://bucket/run"], env=env_for(silent_endpoint),
                            capture_output=True, text=True, timeout=REMOTE_DEADLINE_S * 4 + 60)
    assert "Traceback" not in listed.stderr
    assert "no answer within" in listed.stderr, listed.stderr[-3000:]
    assert time.monotonic() - started < REMOTE_DEADLINE_S * 5 + 120
