"""The stored size of the images a decoding stage decodes, from a few of its input elements.

A pipeline written the usual way decodes and resizes in one map (``list_files`` ->
``map(read, decode, resize)``), so the stage's output says nothing of how large the stored
images are, and "store the images smaller" is the change that pays most when they are camera
photos for a 224-px model. The elements going into that map are encoded images or the paths of
image files: their headers give the sizes (tfopt's own header reader, microseconds each).
"""

from __future__ import annotations

import os
import time

from tfopt.records.image_header import image_size, sniff_format

SAMPLE_ELEMENTS = 8  # input elements read, at most
SAMPLE_SECONDS = 1.0  # and for about this long at most (a shuffle may fill its buffer first)
HEADER_BYTES = 1 << 18  # read from each image file: its header (EXIF data before it included)
_PATH_BYTES = 4096  # a string longer than this is no path


def stored_size(prefix, clock=time.perf_counter) -> tuple[int, int] | None:
    """Mean ``(height, width)`` of the images found in the first elements of ``prefix`` (the
    pipeline cut before a decoding stage): encoded images, or paths of image files, anywhere in
    an element's structure. None where none is found."""
    import tensorflow as tf

    sizes, started = [], clock()
    for element in prefix.take(SAMPLE_ELEMENTS):
        for part in tf.nest.flatten(element):
            if getattr(part, "dtype", None) == tf.string:
                sizes.extend(size for size in map(_size_of, _strings(part.numpy())) if size)
        if clock() - started > SAMPLE_SECONDS:
            break
    if not sizes:
        return None
    return (round(sum(h for h, _ in sizes) / len(sizes)),
            round(sum(w for _, w in sizes) / len(sizes)))


def _strings(value) -> list[bytes]:
    """The byte strings of a string tensor's value: a scalar, or a small batch of them."""
    if isinstance(value, bytes):
        return [value]
    flat = getattr(value, "ravel", None)
    return list(flat())[:SAMPLE_ELEMENTS] if flat else []


def _size_of(value: bytes) -> tuple[int, int] | None:
    """(height, width) of an encoded image, or of the image file a path names; else None."""
    if sniff_format(value[:32]) is not None:
        return _header_size(value)
    if len(value) >= _PATH_BYTES:
        return None
    try:
        path = os.fsdecode(value)
        if not os.path.isfile(path):
            return None
        with open(path, "rb") as handle:
            head = handle.read(HEADER_BYTES)
            size = _header_size(head)
            if size is None and len(head) == HEADER_BYTES:  # a header longer than that
                size = _header_size(head + handle.read())
            return size
    except (OSError, ValueError):  # not a path (a NUL byte in it, say), or unreadable
        return None


def _header_size(data: bytes) -> tuple[int, int] | None:
    image_format = sniff_format(data[:32])
    if image_format is None:
        return None
    try:
        return image_size(data, image_format)
    except ValueError:  # cut short, or a damaged header
        return None
