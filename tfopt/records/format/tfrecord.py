"""TFRecord files: tell one by its name or header, its compression, count its records.

Which files a dataset is (folder, glob, splits) is :mod:`tfopt.records.format.layout`'s.

Example:
    >>> is_tfrecord_file("train-00000-of-00004"), is_gzip(Path("data.tfrecord.gz"))
    (True, True)
    >>> count_records(Path("train-00000-of-00004"), None)
    27
"""

from __future__ import annotations

import gzip
import re
import struct
import zlib
from pathlib import Path

from tfopt.records.format.framing import RecordError, masked_crc32c, read_records

_GZIP_MAGIC = b"\x1f\x8b"


def tf_compression_type(compression: str | None) -> str:
    """TensorFlow's ``compression_type`` for a manifest's compression (``"gzip"`` or None)."""
    return "GZIP" if compression == "gzip" else ""


def is_gzip(path: Path) -> bool:
    """True when the file starts with the GZIP magic bytes (TFRecord GZIP files do)."""
    with open(path, "rb") as handle:
        return handle.read(2) == _GZIP_MAGIC


# Names of TFRecord files: by extension (compressed too), the tfds layout
# (name-train.tfrecord-00000-of-00010) and the Model Garden's (train-00000-of-01024).
_TFRECORD_NAME = re.compile(
    r"(\.(tfrecords?|tfrec|tfr|records?)(\.(gz|gzip|zlib))?$)|(\.tfrecords?-\d+-of-\d+$)"
    r"|(-\d+-of-\d+(\.[a-z]+)?$)", re.IGNORECASE)


def is_tfrecord_file(path) -> bool:
    """Whether a file is meant as TFRecord: its name says so, or it starts with a record header.

    A TFRecord record starts with its length (8 bytes) and the masked CRC-32C of that length (4
    bytes), so a text or other file fails the check; an empty file is an empty TFRecord file.
    A file named as TFRecord is taken whatever it holds, so that a damaged shard is reported.
    """
    path = Path(path)
    if _TFRECORD_NAME.search(path.name):
        return True
    try:
        with open(path, "rb") as handle:
            head = handle.read(12)
            if head[:2] == b"\x1f\x8b":  # GZIP: the header of the decompressed stream
                handle.seek(0)
                with gzip.GzipFile(fileobj=handle) as stream:
                    head = stream.read(12)
    except (OSError, EOFError, zlib.error):
        return False
    if not head:
        return True
    if len(head) < 12:
        return False
    (masked,) = struct.unpack("<I", head[8:])
    return masked == _masked_crc32c(head[:8])


def _masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C (Castagnoli) of ``data``."""
    return masked_crc32c(data)


def count_records(file: Path, compression: str | None) -> int:
    """Exact record count of one file, every CRC checked.

    Like TensorFlow's reader, fewer bytes than a record header after the last whole record end
    the file without an error (``verify`` reports them).

    Raises:
        tfopt.records.format.framing.RecordError: A record cannot be read.
    """
    count = 0
    try:
        for _ in read_records(file, compression):
            count += 1
    except RecordError as error:
        if error.kind != "trailing":
            raise
    return count
