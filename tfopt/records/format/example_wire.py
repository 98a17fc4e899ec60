"""Whether TensorFlow's parser, and tfopt's readers, take a serialized ``tf.train.Example``,
decided without TensorFlow.

``tf.io.parse_example`` does not use protobuf's parser: it walks the bytes itself
(``tensorflow/core/util/example_proto_fast_parsing.cc``), and is stricter than protobuf in
places. A record it refuses stops a training epoch with ``InvalidArgumentError``; ``verify``
must fail it first, naming the shard and record. What it refuses, and this module with it:

- malformed wire data anywhere: a varint cut short or longer than 10 bytes, a length past the
  end of its message (a "negative" length is a huge one), wire types 6 and 7, field number 0;
- groups (wire types 3 and 4) anywhere, however shallow: it has no group support, so deeply
  nested groups cost it nothing, and cost this walk nothing either (the first one ends it);
- inside ``Features``, anything but feature entries; an entry that is not exactly a key and
  a value; a feature whose first field is not its bytes, float or int64 list; inside a list,
  anything but its values.

Malformed wire data that TensorFlow's parser happens to let by fails too, since protobuf's
parser (and tfopt's readers with it) refuses it: an unknown field whose length runs past the
end (TensorFlow skips to the end), packed floats of a length that is not a multiple of 4
(TensorFlow drops the odd bytes).

A field an Example does not have at its top level fails as well, though TensorFlow's parser
skips it: any field but 1, or field 1 with another wire type than length-delimited. Skipped,
its data would be lost without a word (a ``tf.train.SequenceExample``'s ``feature_lists``,
field 2, is such a field), and ``inspect`` and the pipelines' schema sample refuse such a
record: this module is the one decoder all of them and ``verify`` use, so they agree.

Fields TensorFlow skips deeper down pass: fields after a feature's list. Keys need not be UTF-8
for TensorFlow (protobuf's parser refuses them, and :class:`ExampleReader` with it;
:func:`example_problem` does not).

:class:`ExampleReader` is what ``verify``, ``inspect`` and the schema sample call per record:
protobuf's C parser first, and a record that serializes back to the same bytes (canonical, as
tfopt and most writers produce) is taken without the walk, which runs in Python (a few
microseconds per feature).

Example:
    >>> example_problem(b"\\x0a\\x00")  # an Example with empty Features
    >>> example_problem(b"\\x0b\\x0c")  # a group
    'field 1 of the Example is a group (wire type 3), which TensorFlow\\'s parser refuses'
"""

from __future__ import annotations

import dataclasses

from tfopt.records.format.example_pb import example_classes

_MAX_VARINT = 10  # bytes of the longest varint (64 bits, 7 per byte)
_WIRE_NAMES = {0: "varint", 1: "64-bit", 2: "length-delimited", 3: "group", 4: "group end",
               5: "32-bit", 6: "not a wire type", 7: "not a wire type"}
# The tags (field << 3 | wire type) TensorFlow's parser looks for, each one byte.
_FIELD_1_BYTES = 0x0A  # field 1, length-delimited: Example.features, an entry, a key, a list
_ENTRY_VALUE = 0x12  # field 2, length-delimited: an entry's value
_KIND_TAGS = {0x0A: "bytes_list", 0x12: "float_list", 0x1A: "int64_list"}
_FLOAT_VALUE = 0x0D  # field 1, 32-bit: an unpacked float
_INT64_VALUE = 0x08  # field 1, varint: an unpacked int64
# Records longer than this are walked rather than serialized back to be compared: the walk
# costs per field, the round trip per byte, and the round trip holds two more copies of the
# record while it runs (docs/benchmarks.md has the peaks with it and without)
_ROUND_TRIP_BYTES = 1 << 20


class _Malformed(Exception):
    """Where and why the walk stopped."""


def _varint(data: bytes, position: int, end: int, what: str) -> tuple[int, int]:
    value = shift = 0
    start = position
    while position < end:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7
        if position - start >= _MAX_VARINT:
            raise _Malformed(f"{what}: a varint longer than {_MAX_VARINT} bytes at byte {start}")
    raise _Malformed(f"{what}: a varint cut short at byte {start} (truncated record?)")


def _length(data: bytes, position: int, end: int, what: str) -> tuple[int, int]:
    """A length-delimited field's length and the position of its first byte; the field must
    end by ``end``."""
    at = position
    length, position = _varint(data, position, end, what)
    if length > end - position:
        shown = f"{length:,}" if length < 1 << 32 else f"{length:,} (a negative length?)"
        raise _Malformed(f"{what}: length {shown} at byte {at} runs past the end of its "
                         f"message ({end - position:,} byte(s) left)")
    return length, position


def _skip(data: bytes, position: int, end: int, tag: int, what: str) -> int:
    """Past the value of an unknown field, as TensorFlow's parser skips one."""
    field, wire = tag >> 3, tag & 7
    if field == 0:
        raise _Malformed(f"{what}: field number 0 at byte {position}, which protobuf has not")
    if wire in (3, 4):
        raise _Malformed(f"field {field} of {what} is a {_WIRE_NAMES[wire]} (wire type {wire}), "
                         "which TensorFlow's parser refuses")
    if wire in (6, 7):
        raise _Malformed(f"{what}: field {field} has wire type {wire}, which protobuf has not")
    if wire == 0:
        return _varint(data, position, end, what)[1]
    if wire == 2:
        length, position = _length(data, position, end, what)
        return position + length
    size = 8 if wire == 1 else 4
    if size > end - position:
        raise _Malformed(f"{what}: a {size * 8}-bit value cut short at byte {position}")
    return position + size


@dataclasses.dataclass(frozen=True)
class ExampleProblem:
    """Why a record is not an Example that tfopt reads.

    Attributes:
        detail: What is wrong, and where in the record.
        tensorflow_refuses: Whether TensorFlow's parser refuses it too (False: a record it
            takes, dropping what an Example does not have, that tfopt's readers refuse). True
            for all malformed wire data, the few kinds it happens to let by included (above).
    """

    detail: str
    tensorflow_refuses: bool

    def __str__(self) -> str:
        reader = "TensorFlow can parse" if self.tensorflow_refuses else "tfopt reads"
        return f"not a tf.train.Example {reader}: {self.detail}"


def example_problem(data: bytes) -> str | None:
    """What TensorFlow's parser, or tfopt's readers, refuse in a serialized
    ``tf.train.Example``, or None.

    Example:
        >>> example_problem(b"\\x0a\\x05\\x0a\\x03\\x0a\\x01x")  # an entry without its value
        "feature entry 0: a key and no value (TensorFlow's parser needs both)"
    """
    problem = _walk(data)
    return problem.detail if problem is not None else None


def _walk(data: bytes) -> ExampleProblem | None:
    try:
        foreign = _example(data)
    except _Malformed as problem:
        return ExampleProblem(str(problem), tensorflow_refuses=True)
    return ExampleProblem(foreign, tensorflow_refuses=False) if foreign else None


def _example(data: bytes) -> str | None:
    """Walk the Example; return what it holds that an Example does not have (the first such
    field), once the whole record is known to be one TensorFlow's parser takes."""
    end, position, entries, foreign = len(data), 0, 0, None
    while position < end:
        at = position
        tag, position = _varint(data, position, end, "the Example")
        if tag == _FIELD_1_BYTES:
            length, position = _length(data, position, end, "the Example's features")
            entries = _features(data, position, position + length, entries)
            position += length
        else:  # skipped by TensorFlow's parser, as an unknown field, or refused (a group)
            position = _skip(data, position, end, tag, "the Example")
            foreign = foreign or _foreign_field(tag, at)
    return foreign


def _foreign_field(tag: int, at: int) -> str:
    """A top-level field an Example does not have, said with where it is."""
    field, wire = tag >> 3, _WIRE_NAMES[tag & 7]
    if field == 1:
        what = (f"field 1 as a {wire} value at byte {at}, where an Example's features are "
                "length-delimited")
    else:
        hint = " (a tf.train.SequenceExample's feature_lists?)" if field == 2 else ""
        what = f"field {field} ({wire}) at byte {at}{hint}, which an Example does not have"
    return f"{what}; TensorFlow's parser would skip it and the data it holds"


def _features(data: bytes, position: int, end: int, entries: int) -> int:
    """Walk one Features message; return the entries counted so far (messages merge)."""
    while position < end:
        at = position
        tag, position = _varint(data, position, end, "Features")
        if tag != _FIELD_1_BYTES:
            raise _Malformed(f"Features: field {tag >> 3} ({_WIRE_NAMES[tag & 7]}) at byte {at}, "
                             "where TensorFlow's parser takes only feature entries")
        what = f"feature entry {entries}"
        length, position = _length(data, position, end, what)
        _entry(data, position, position + length, what)
        position += length
        entries += 1
    return entries


def _entry(data: bytes, position: int, end: int, what: str) -> None:
    """One map entry: exactly two fields, a key and a value, in either order."""
    key = value = None
    for _ in range(2):
        if position >= end:
            have = "a key and no value" if key is not None else (
                "a value and no key" if value is not None else "neither key nor value")
            raise _Malformed(f"{what}: {have} (TensorFlow's parser needs both)")
        at = position
        tag, position = _varint(data, position, end, what)
        if tag not in (_FIELD_1_BYTES, _ENTRY_VALUE):
            raise _Malformed(f"{what}: field {tag >> 3} ({_WIRE_NAMES[tag & 7]}) at byte {at}, "
                             "where TensorFlow's parser takes only the key and the value")
        length, position = _length(data, position, end, what)
        if tag == _FIELD_1_BYTES:
            key = data[position:position + length]
        else:
            value = (position, position + length)
        position += length
    if position != end:
        raise _Malformed(f"{what}: more than a key and a value (TensorFlow's parser refuses "
                         "the rest)")
    if value is not None:
        shown = key.decode("utf-8", "backslashreplace") if key is not None else None
        _feature(data, *value, f"feature {shown!r}" if shown is not None else what)


def _feature(data: bytes, position: int, end: int, what: str) -> None:
    """A Feature: empty (no list), or its list first; what follows the list is skipped."""
    if position == end:
        return
    tag = data[position]
    kind = _KIND_TAGS.get(tag)
    if kind is None:
        raise _Malformed(f"{what}: starts with tag byte 0x{tag:02x}, where TensorFlow's parser "
                         "needs its bytes_list, float_list or int64_list")
    length, position = _length(data, position + 1, end, f"{what} {kind}")
    _LISTS[kind](data, position, position + length, f"{what} {kind}")


def _bytes_list(data: bytes, position: int, end: int, what: str) -> None:
    while position < end:
        at = position
        tag, position = _varint(data, position, end, what)
        if tag != _FIELD_1_BYTES:
            raise _Malformed(f"{what}: field {tag >> 3} ({_WIRE_NAMES[tag & 7]}) at byte {at} "
                             "among its values")
        length, position = _length(data, position, end, what)
        position += length


def _float_list(data: bytes, position: int, end: int, what: str) -> None:
    if position == end:
        return
    if data[position] == _FIELD_1_BYTES:  # packed: TensorFlow reads one run, skips the rest
        length, position = _length(data, position + 1, end, what)
        if length % 4:
            raise _Malformed(f"{what}: {length} packed bytes, not a whole number of floats")
        return
    while position < end:
        if data[position] != _FLOAT_VALUE:
            raise _Malformed(f"{what}: tag byte 0x{data[position]:02x} at byte {position} among "
                             "its unpacked floats")
        if end - position < 5:
            raise _Malformed(f"{what}: a float cut short at byte {position}")
        position += 5


def _int64_list(data: bytes, position: int, end: int, what: str) -> None:
    if position == end:
        return
    if data[position] == _FIELD_1_BYTES:  # packed: TensorFlow reads one run, skips the rest
        length, position = _length(data, position + 1, end, what)
        stop = position + length
        while position < stop:
            position = _varint(data, position, stop, what)[1]
        return
    while position < end:
        if data[position] != _INT64_VALUE:
            raise _Malformed(f"{what}: tag byte 0x{data[position]:02x} at byte {position} among "
                             "its unpacked integers")
        position = _varint(data, position + 1, end, what)[1]


_LISTS = {"bytes_list": _bytes_list, "float_list": _float_list, "int64_list": _int64_list}


class ExampleReader:
    """Parse serialized Examples, and say why TensorFlow's parser or tfopt's readers would
    refuse one.

    ``read(data)`` returns ``(example, problem)``: the parsed message (None where protobuf's
    parser refuses the bytes) and an :class:`ExampleProblem` (None for a record that every
    reader takes). A record that serializes back to its own bytes once unknown fields are
    dropped (deterministic order: what tfopt writes) holds known fields only, in their
    canonical encoding, which TensorFlow's parser takes: no walk is needed. Any other record,
    and any longer than 1 MiB, is walked (:func:`example_problem`).
    """

    def __init__(self):
        from google.protobuf.message import DecodeError

        self._parse = example_classes().Example.FromString
        self._decode_error = DecodeError

    def read(self, data: bytes):
        try:
            example = self._parse(data)
        except self._decode_error:
            example = None
        else:
            # protobuf keeps unknown fields (a group among them) and writes them back: only
            # without them does the same bytes mean known fields alone
            example.DiscardUnknownFields()
            if (len(data) <= _ROUND_TRIP_BYTES
                    and example.SerializeToString(deterministic=True) == data):
                return example, None
        problem = _walk(data)
        if problem is None and example is None:
            # TensorFlow would take it, tfopt's readers (protobuf's) would not
            problem = ExampleProblem("protobuf's parser refuses it (a feature key that is not "
                                     "UTF-8?)", tensorflow_refuses=False)
        return example, problem
