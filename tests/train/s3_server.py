"""A real S3-compatible server on localhost for the backups' second location: moto in server
mode (``pip install 'tfopt[test]'``), started by the test, a bucket per test. s3fs (through
botocore) finds it by ``AWS_ENDPOINT_URL``, in this process and in the ones it starts; fsspec's
own ``FSSPEC_S3_ENDPOINT_URL`` is set too, though fsspec reads it only when first imported."""

from __future__ import annotations

import logging
import uuid

import pytest

ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
       "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="session")
def s3_endpoint():
    """The server's URL; the suite skips (saying why) where moto or s3fs is not installed."""
    server_module = pytest.importorskip(
        "moto.server", reason="moto[server] is not installed (pip install 'tfopt[test]')")
    pytest.importorskip("s3fs", reason="s3fs is not installed (pip install 'tfopt[remote]')")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3_url(s3_endpoint, monkeypatch):
    """``s3://<a new bucket>/run``, with the environment that reaches the server set here
    (and so inherited by subprocesses)."""
    import fsspec

    for name, value in {**ENV, "AWS_ENDPOINT_URL": s3_endpoint,
                                  "FSSPEC_S3_ENDPOINT_URL": s3_endpoint}.items():
        monkeypatch.setenv(name, value)
    bucket = f"tfopt-{uuid.uuid4().hex[:12]}"
    fsspec.filesystem("s3", endpoint_url=s3_endpoint, skip_instance_cache=True).mkdir(bucket)
    return f"s3://{bucket}/run"
