"""TFRecord files read and written without TensorFlow.

A TFRecord file is a sequence of records, each framed as::

    uint64  length           (little endian)
    uint32  masked CRC-32C of the 8 length bytes
    bytes   data[length]
    uint32  masked CRC-32C of the data

where the mask is ``((crc >> 15) | (crc << 17)) + 0xa282ead8`` (mod 2**32). A GZIP file holds
that sequence compressed as one GZIP stream. The CRC-32C comes from ``google-crc32c`` (C code,
hardware-accelerated where the CPU has CRC instructions); the files written are byte for byte
those of ``tf.io.TFRecordWriter`` (GZIP: zlib's default level, window and memory settings,
zlib's own header, as TensorFlow's writer uses them).

Example:
    >>> with RecordWriter("a.tfrecord") as writer:
    ...     writer.write(b"hello")
    >>> [bytes(record) for record in read_records("a.tfrecord")]
    [b'hello']
"""

from __future__ import annotations

import io
import os
import struct
import zlib
from pathlib import Path

from tfopt.errors import TfoptError

HEADER_BYTES = 12  # length (8) and its masked CRC (4)
FOOTER_BYTES = 4  # the data's masked CRC
FRAMING_BYTES = HEADER_BYTES + FOOTER_BYTES

_MASK_DELTA = 0xA282EAD8
_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
_CHUNK = 1 << 20  # bytes read at a time where a length cannot be checked against a file size
# The longest record tfopt's readers take (verify, inspect, a pipeline's schema sample and its
# walk of plain shards' headers); a longer one is refused from its header, before its data is
# read. TensorFlow's reader has no such limit: it takes whatever length a header says, and a
# GZIP file a thousand times smaller than its records can say so and hold them (a
# decompression bomb: docs/records.md, "Memory"). No dataset needs more: TensorFlow's decoders
# refuse an image of 2**29 decoded bytes or more (image_limits.TF_MAX_JPEG_BYTES), so a record
# of one image it decodes fits, and a batch of 32 records this long is 16 GiB before any
# decode. verify and inspect hold a record about three times while they read it (its data,
# protobuf's parse, one value), so this also bounds what one file in flight costs them.
MAX_READ_RECORD_BYTES = 1 << 29
_BUFFER = 1 << 20  # the file buffer of readers and writers

_crc32c_value = None


class RecordError(TfoptError):
    """A record that cannot be read: cut short, a CRC mismatch, a damaged GZIP stream.

    Attributes:
        file: The file.
        index: The record's index in the file (the records before it are whole).
        offset: The byte offset of its header (in the decompressed stream for GZIP files).
        reason: What is wrong, without the file and index.
        kind: ``"truncated"`` (a length beyond the end of the file or stream),
            ``"trailing"`` (fewer bytes than a header after the last whole record), ``"crc"``,
            ``"gzip"`` or ``"too_long"`` (a length over :data:`MAX_READ_RECORD_BYTES`).
    """

    def __init__(self, file, index: int, offset: int, reason: str, kind: str):
        self.file, self.index, self.offset = str(file), index, offset
        self.reason, self.kind = reason, kind
        super().__init__(f"{file}: record {index} at offset {offset}: {reason}")


def _crc32c():
    global _crc32c_value
    if _crc32c_value is None:
        try:
            from google_crc32c import value
        except ImportError as error:
            raise TfoptError(
                "TFRecord files need the 'google-crc32c' package for their CRC-32C checksums: "
                "pip install google-crc32c") from error
        _crc32c_value = value
    return _crc32c_value


def masked_crc32c(data) -> int:
    """TFRecord's masked CRC-32C (Castagnoli) of ``data``."""
    return _mask(_crc32c()(data))


def frame(data: bytes) -> bytes:
    """One record as it lies in a TFRecord file: header, data, data CRC."""
    crc = _crc32c()
    length = _LENGTH.pack(len(data))
    return b"".join((length, _CRC.pack(_mask(crc(length))), data, _CRC.pack(_mask(crc(data)))))


def _mask(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


class RecordWriter:
    """Write records into a TFRecord file, plain or GZIP (``compression="gzip"``).

    The bytes are those ``tf.io.TFRecordWriter`` writes for the same records and compression.
    Use it as a context manager, or call :meth:`close`.
    """

    def __init__(self, path, compression: str | None = None):
        self._crc = _crc32c()
        self._handle = open(path, "wb", buffering=_BUFFER)  # noqa: SIM115 (closed by close())
        # TensorFlow's ZlibCompressionOptions::GZIP(): default level, 15-bit window + GZIP
        # header (31), memory level 9, default strategy; zlib writes the GZIP header itself
        self._deflate = (zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, 31, 9)
                         if compression == "gzip" else None)

    def write(self, data: bytes) -> None:
        crc = self._crc
        length = _LENGTH.pack(len(data))
        framed = b"".join((length, _CRC.pack(_mask(crc(length))), data,
                           _CRC.pack(_mask(crc(data)))))
        if self._deflate is not None:
            framed = self._deflate.compress(framed)
        self._handle.write(framed)

    def flush(self) -> None:
        self._handle.flush()

    def close(self) -> None:
        if self._handle.closed:
            return
        try:
            if self._deflate is not None:
                self._handle.write(self._deflate.flush(zlib.Z_FINISH))
        finally:
            self._handle.close()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_records(path, compression: str | None = None, *, check_crc: bool = True):
    """Yield each record's data (``bytes``) of a TFRecord file, in order.

    Every length is checked before its data is read: against :data:`MAX_READ_RECORD_BYTES`,
    against the bytes left in a plain file, and, in a GZIP file, by reading the data in pieces
    of at most 1 MiB into one growing buffer, so a damaged length (say 2**36 in a 1 KB file) is
    an error, never an allocation, and a long record is held once, not once per piece and
    again whole.

    Args:
        path: The file.
        compression: ``"gzip"`` or None.
        check_crc: Check both CRCs of every record. Defaults to True.

    Raises:
        RecordError: At the first record that cannot be read (its index and offset named);
            the records before it were yielded.
        OSError: The file cannot be opened.
    """
    if compression == "gzip":
        yield from _read_gzip(Path(path), check_crc)
    else:
        yield from _read_plain(Path(path), check_crc)


def _read_plain(path: Path, check_crc: bool):
    crc = _crc32c() if check_crc else None
    with open(path, "rb", buffering=_BUFFER) as handle:
        left = handle.seek(0, 2)
        handle.seek(0)
        offset = index = 0
        while left:
            header = handle.read(HEADER_BYTES)
            if len(header) < HEADER_BYTES:
                raise RecordError(path, index, offset, f"{len(header)} byte(s) after the last "
                                  "whole record: a record cut short, or not a TFRecord file",
                                  "trailing")
            length = _check_header(path, index, offset, header, crc)
            left -= HEADER_BYTES
            if length + FOOTER_BYTES > left:
                raise RecordError(path, index, offset, f"truncated record: its length says "
                                  f"{length:,} bytes, {max(0, left - FOOTER_BYTES):,} are left in "
                                  "the file", "truncated")
            _check_length(path, index, offset, length)
            data = handle.read(length)
            footer = handle.read(FOOTER_BYTES)
            if len(data) < length or len(footer) < FOOTER_BYTES:  # the file shrank meanwhile
                raise RecordError(path, index, offset, "truncated record (the file ended early)",
                                  "truncated")
            if crc is not None and _CRC.unpack(footer)[0] != _mask(crc(data)):
                raise RecordError(path, index, offset, "corrupted record: data CRC mismatch",
                                  "crc")
            yield data
            left -= length + FOOTER_BYTES
            offset += length + FRAMING_BYTES
            index += 1


def _check_header(path, index: int, offset: int, header: bytes, crc) -> int:
    length_bytes = header[:8]
    if crc is not None and _CRC.unpack_from(header, 8)[0] != _mask(crc(length_bytes)):
        raise RecordError(path, index, offset, "corrupted record: length CRC mismatch (a "
                          "damaged header, or not a TFRecord file)", "crc")
    return _LENGTH.unpack(length_bytes)[0]


def _check_length(path, index: int, offset: int, length: int) -> None:
    """Refuse a length over MAX_READ_RECORD_BYTES; in a plain file, after the check against
    the bytes left, which says more of a damaged header."""
    if length > MAX_READ_RECORD_BYTES:
        raise RecordError(path, index, offset, f"its length says {length:,} bytes, more than "
                          f"the {MAX_READ_RECORD_BYTES:,} tfopt reads as one record "
                          "(MAX_READ_RECORD_BYTES): a decompression bomb or a damaged header",
                          "too_long")


def _read_gzip(path: Path, check_crc: bool):
    import gzip

    crc = _crc32c() if check_crc else None
    offset = index = 0
    try:
        with open(path, "rb", buffering=_BUFFER) as raw, gzip.GzipFile(fileobj=raw) as stream:
            while True:
                header = stream.read(HEADER_BYTES)
                if not header:
                    return
                if len(header) < HEADER_BYTES:
                    raise RecordError(path, index, offset, f"{len(header)} byte(s) after the "
                                      "last whole record (decompressed): a record cut short, or "
                                      "not a TFRecord file", "trailing")
                length = _check_header(path, index, offset, header, crc)
                _check_length(path, index, offset, length)  # the stream's length is unknown
                if length + FOOTER_BYTES <= _CHUNK:
                    body = stream.read(length + FOOTER_BYTES)
                    data, footer = body[:length], body[length:]
                else:
                    data = _read_long(stream, length)
                    footer = stream.read(FOOTER_BYTES)
                if len(data) + len(footer) < length + FOOTER_BYTES:
                    raise RecordError(path, index, offset, f"truncated record: its length says "
                                      f"{length:,} bytes, the stream ends "
                                      f"{len(data) + len(footer):,} byte(s) after its header",
                                      "truncated")
                if crc is not None and _CRC.unpack(footer)[0] != _mask(crc(data)):
                    raise RecordError(path, index, offset, "corrupted record: data CRC mismatch",
                                      "crc")
                yield data
                offset += length + FRAMING_BYTES
                index += 1
    except (EOFError, zlib.error, gzip.BadGzipFile) as error:
        raise RecordError(path, index, offset, f"the GZIP stream is cut short or damaged "
                          f"({type(error).__name__}: {error}); records after it are lost",
                          "gzip") from None


def _read_long(stream, length: int) -> bytes:
    """``length`` bytes of ``stream`` or fewer where it ends, read in pieces into one buffer:
    a damaged length allocates no more than the stream holds, and the record is held once
    (a BytesIO grows in place and hands its buffer over without a copy; a join of the pieces,
    then a slice of the data, held it three times)."""
    buffer, got = io.BytesIO(), 0
    while got < length:
        piece = stream.read(min(_CHUNK, length - got))
        if not piece:
            break
        buffer.write(piece)
        got += len(piece)
    return buffer.getvalue()


def gzip_expansion(path, sample_bytes: int = 8 << 20) -> float | None:
    """Decompressed bytes per compressed byte over the start of a GZIP file (about
    ``sample_bytes`` of output, its first member): what turns the file sizes of GZIP shards
    into a record count estimate. None for an empty or damaged stream.

    zlib is fed 64-KB pieces and reports what it has not used, so the compressed bytes behind
    the output are known to the byte (a GzipFile reads ahead a buffer that hides them).
    """
    stream = zlib.decompressobj(wbits=31)  # a gzip header and trailer
    produced = consumed = 0
    try:
        with open(path, "rb") as handle:
            while produced < sample_bytes and not stream.eof:
                piece = handle.read(1 << 16)
                if not piece:
                    break
                produced += len(stream.decompress(piece, sample_bytes - produced + 1))
                # what the decompressor has not taken: the unread tail of this piece (output
                # capped) and whatever follows the member's end
                consumed += len(piece) - len(stream.unconsumed_tail) - len(stream.unused_data)
                while stream.unconsumed_tail and produced < sample_bytes:
                    tail = stream.unconsumed_tail
                    produced += len(stream.decompress(tail, sample_bytes - produced + 1))
                    consumed += len(tail) - len(stream.unconsumed_tail)
                if stream.unconsumed_tail:
                    break
    except (OSError, zlib.error):
        return None
    return produced / consumed if produced and consumed else None


def count_framed_records(path) -> int:
    """The records of a plain (uncompressed) TFRecord file, counted from their headers alone.

    Reads 12 bytes per record: each length's CRC is checked and the length against the bytes
    left in the file, and the next header is found by seeking past the data, whose CRC is not
    checked. A reader that allocates a record's length before reading it (TensorFlow's) is
    safe on a file that passes. Fewer bytes than a header after the last record end the file,
    as they do for TensorFlow's reader.

    Raises:
        RecordError: A header that fails its CRC or a length past the end of the file
            (``"crc"``, ``"truncated"``); the records before it are whole as far as framing
            goes.
        OSError: The file cannot be opened or read.
    """
    path = Path(path)
    crc = _crc32c()
    with open(path, "rb", buffering=0) as handle:
        size = os.fstat(handle.fileno()).st_size
        read_at = _reader_at(handle)
        offset = index = 0
        while size - offset >= HEADER_BYTES:
            header = read_at(offset)
            if len(header) < HEADER_BYTES:  # the file shrank meanwhile
                break
            length = _check_header(path, index, offset, header, crc)
            left = size - offset - HEADER_BYTES
            if length + FOOTER_BYTES > left:
                raise RecordError(path, index, offset, f"truncated record: its length says "
                                  f"{length:,} bytes, {max(0, left - FOOTER_BYTES):,} are left in "
                                  "the file", "truncated")
            _check_length(path, index, offset, length)
            offset += length + FRAMING_BYTES
            index += 1
    return index


def _reader_at(handle):
    """``read_at(offset)``: the header at ``offset``, one system call each where there is pread."""
    fd = handle.fileno()
    if hasattr(os, "pread"):
        return lambda offset: os.pread(fd, HEADER_BYTES, offset)

    def read_at(offset):
        handle.seek(offset)
        return handle.read(HEADER_BYTES)

    return read_at


def count_records(path, compression: str | None = None) -> tuple[int, int]:
    """``(records, data bytes)`` of a whole file, every CRC checked.

    Raises:
        RecordError: A record cannot be read.
    """
    count = total = 0
    for data in read_records(path, compression):
        count += 1
        total += len(data)
    return count, total
