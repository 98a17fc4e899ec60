"""Running out of disk space during a conversion: checked before it starts, and named (not a
traceback from a worker) when it happens anyway."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from tfopt._text import human_bytes
from tfopt.errors import DiskFullError

# JPEG bytes barely compress: even GZIP shards of images hold at least this share of them
_IMAGE_OUTPUT_SHARE = 0.95


def free_bytes(folder: Path) -> int:
    """Free bytes for an unprivileged writer on the file system that holds ``folder`` (or would:
    the nearest existing parent is asked when it does not exist yet)."""
    probe = Path(os.path.abspath(folder))
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free


def require_space_for_images(folder: Path, image_bytes: int, what: str) -> None:
    """Refuse before writing when ``image_bytes`` of stored images (less GZIP's few percent)
    cannot fit beside ``folder``: an image dataset is never smaller than its images. Other
    sources are not checked up front: their records may be smaller than the source."""
    needed = int(image_bytes * _IMAGE_OUTPUT_SHARE)
    free = free_bytes(folder)
    if needed > free:
        raise DiskFullError(f"{folder}: {what} needs about {human_bytes(needed)} and the disk "
                            f"there has {human_bytes(free)} free; free space or choose "
                            "another folder (nothing was written)")


def is_disk_full(error: BaseException) -> bool:
    """An out-of-space error from Python's I/O or from TensorFlow's record writer (whose
    ResourceExhaustedError carries the C library's message)."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(error)
    return "No space left on device" in text or "Disk quota exceeded" in text
