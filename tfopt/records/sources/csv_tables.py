"""CSV (and TSV) files with a header row: one record per row, one feature per column.

Each column is typed from all of its cells: int64, float32 where float32 keeps every number,
float64 (raw bytes) otherwise, else text; a number a type would change is refused, never
rounded. Workers seek to their rows by byte offset, and check each row's bytes against the
CRC-32 the scan took of them: a file written to since the scan is refused, never read into a
dataset that mixes its two versions.

Example:
    >>> scanned = scan_csv(Path("table.csv"), label="y", skip_bad=False, max_size=None,
    ...                    quality=90, check="structure")
    >>> [spec.dtype for spec in scanned.features]
    ['float32', 'int64']
"""

from __future__ import annotations

import csv
import logging
import math
import re
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from tfopt.errors import SourceError
from tfopt.records.manifest import SkippedItem
from tfopt.records.schema import INT64_MAX, INT64_MIN, Encoding, FeatureKind, FeatureSpec
from tfopt.records.sources.labels import choose_label, labels_from_values
from tfopt.records.sources.shared import ScannedSource, SourceKind, source_changed

logger = logging.getLogger("tfopt")




def _csv_rows(path: Path, start: int = 0) -> Iterator[tuple[int, int, list[str], int]]:
    """Yield ``(line number, byte offset, fields, CRC-32 of the row's bytes)`` for each row
    from byte ``start``.

    Offsets let workers seek straight to their rows, so no process holds the whole file, and
    the checksum lets them tell that the bytes there are still the row the scan read. Quoted
    fields with line breaks are handled by csv.reader (which reads no line beyond the row's
    last); the offset is that of the row's first line.
    """
    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    with open(path, "rb") as handle:
        handle.seek(start)
        position = start
        lines_read = 0
        crc = 0

        def lines():
            nonlocal position, lines_read, crc
            for raw in handle:
                position += len(raw)
                lines_read += 1
                crc = zlib.crc32(raw, crc)
                try:
                    yield raw.decode("utf-8-sig" if position == len(raw) else "utf-8")
                except UnicodeDecodeError as error:
                    raise SourceError(path, f"line {lines_read}: not UTF-8 text ({error.reason})") from None

        reader = csv.reader(lines(), delimiter=delimiter)
        while True:
            row_start = position
            first_line = lines_read + 1
            crc = 0
            try:
                fields = next(reader)
            except StopIteration:
                return
            except csv.Error as error:
                raise SourceError(path, f"line {first_line}: malformed CSV ({error})") from None
            yield first_line, row_start, fields, crc


# A number in a CSV cell is plain ASCII decimal notation: optional sign, digits, decimal point,
# exponent, or a spelling of nan/inf (any case), with spaces or tabs around it. int() and float()
# alone would also take Python's '1_000' and digits of other scripts ('١٢٣' is 123).
_INT_TEXT = re.compile(r"[ \t]*[+-]?[0-9]+[ \t]*")
_DECIMAL_TEXT = re.compile(r"[ \t]*[+-]?(?:(?P<whole>[0-9]+)(?P<point>\.(?P<fraction>[0-9]*))?"
                           r"|\.(?P<only_fraction>[0-9]+))(?P<exponent>[eE][+-]?[0-9]+)?[ \t]*")
_SHORT_DECIMAL_TEXT = re.compile(r"[ \t]*[+-]?(?:[0-9]+\.[0-9]*|\.[0-9]+)[ \t]*")  # no exponent
_NAN_INF_TEXT = re.compile(r"[ \t]*[+-]?(?:nan|inf|infinity)[ \t]*", re.IGNORECASE)

_FLOAT32 = np.finfo(np.float32)
_FLOAT32_MAX = float(_FLOAT32.max)
_FLOAT32_TINY = float(_FLOAT32.smallest_normal)  # below it float32 loses digits (subnormal)
_FLOAT32_DIGITS = 6  # FLT_DIG: every decimal of 6 significant digits survives float32 and back


def _float32_keeps(value: float, significant: int) -> bool:
    """Whether storing a cell's number as float32 keeps it: the float32's shortest repr reads
    back as the same float64 as the cell's text, and the float32 is finite and normal.

    So '0.1' is kept (float32 prints it as 0.1), '0.75795440294030247', '123456789' (float32
    has 123456792) and '1e39' (inf in float32) are not.

    Args:
        value: The float64 value of the cell's text (finite: nan and inf are kept anyway).
        significant: The text's count of significant digits; 6 or fewer need no repr.
    """
    magnitude = abs(value)
    if magnitude == 0:
        return True
    if not _FLOAT32_TINY <= magnitude <= _FLOAT32_MAX:
        return False
    if significant <= _FLOAT32_DIGITS:
        return True
    return float(str(np.float32(value))) == value


def _float64_holds(integer: int) -> bool:
    """Whether float64 holds an integer exactly (all up to 2**53 in magnitude, some beyond)."""
    try:
        return float(integer) == integer
    except OverflowError:  # beyond float64's range
        return False


class _Column:
    """What the cells of one CSV column allow it to be stored as, updated chunk by chunk.

    A column is int64 when every cell is an integer (and none is empty: int64 has no NaN),
    a float column when every cell is a number or empty (empty cells become NaN): float32 when
    float32 keeps every number (see :func:`_float32_keeps`), float64 otherwise; text otherwise.
    A float column whose number float64 itself would change (an integer beyond 2**53 that it
    cannot hold, a value beyond its range, a non-zero value below it) is refused, never rounded.
    """

    __slots__ = ("name", "is_int", "is_float", "float32_keeps", "has_empty", "numbers",
                 "too_large", "changed", "first_text")

    def __init__(self, name: str):
        self.name = name
        self.is_int = True  # every non-empty cell so far an integer
        self.is_float = True  # every non-empty cell so far a number (integers included)
        self.float32_keeps = True  # float32 keeps every number so far
        self.has_empty = False
        self.numbers = 0  # numbers before the first cell that is none (for a warning)
        self.too_large: tuple[int, str] | None = None  # first integer beyond int64 (line, text)
        self.changed: tuple[int, str, str] | None = None  # first number float64 changes, why
        self.first_text: tuple[int, str] | None = None  # first cell that is not a number

    def see(self, lines: list[int], texts: tuple[str, ...]) -> None:
        """Take in a chunk of the column's cells, ``texts``, read from lines ``lines``.

        A chunk at a time, with the usual cells settled by one regex and a length: a common
        cell costs no float parse.
        """
        if not self.is_float:
            return  # text already: nothing more to learn
        if "" in texts:
            self.has_empty = True
        is_int = self.is_int
        int_text, short_decimal = _INT_TEXT.fullmatch, _SHORT_DECIMAL_TEXT.fullmatch
        for position, (line, text) in enumerate(zip(lines, texts, strict=True)):
            if not text:
                continue
            if is_int:
                if int_text(text):
                    if len(text) > 7:  # up to 7 characters, within +-2**24: exact everywhere
                        self._see_integer(line, text, int(text))
                    continue
                is_int = self.is_int = False
            if len(text) <= 7 and short_decimal(text):
                continue  # at most 6 digits, from 1e-6 to 1e6: exact enough everywhere
            match = _DECIMAL_TEXT.fullmatch(text)
            if match is not None:
                self._see_decimal(line, text, match)
            elif not _NAN_INF_TEXT.fullmatch(text):  # nan and inf are the same in every float
                self.is_float = False
                self.first_text = (line, text)
                self.numbers += position - texts[:position].count("")
                return
        self.numbers += len(texts) - texts.count("")

    def _see_decimal(self, line: int, text: str, match: re.Match) -> None:
        if match["point"] is None and match["only_fraction"] is None and match["exponent"] is None:
            self._see_integer(line, text, int(text))  # an integer in a column of decimals
            return
        value = float(text)
        whole, fraction = match["whole"] or "", match["fraction"] or match["only_fraction"] or ""
        significant = len((whole + fraction).strip("0"))
        if self.changed is None:
            if math.isinf(value):
                self.changed = (line, text, "is beyond float64's range (about 1.8e308); write "
                                "inf if that is meant")
            elif value == 0 and significant:
                self.changed = (line, text, "is too small for float64 and would become 0; "
                                "write 0 if that is meant")
        if self.float32_keeps and not _float32_keeps(value, significant):
            self.float32_keeps = False

    def _see_integer(self, line: int, text: str, value: int) -> None:
        """An integer that may be beyond 2**24: float32 may not keep it, nor float64 one
        beyond 2**53, nor int64 one beyond 2**63."""
        if self.too_large is None and not INT64_MIN <= value <= INT64_MAX:
            self.too_large = (line, text)
        exact = _float64_holds(value)
        if self.changed is None and not exact:
            self.changed = (line, text, "float64, the type of a float column, cannot hold "
                            "exactly (it holds every integer up to 2**53)")
        if self.float32_keeps and not (exact and _float32_keeps(float(value), 99)):
            self.float32_keeps = False

    def feature(self, src: Path, label: bool) -> tuple[str, FeatureSpec]:
        """The column's reader kind and stored feature; refuses a column that would change."""
        name = self.name
        if self.is_int and not self.has_empty:
            if self.too_large is not None:
                line_number, text = self.too_large
                raise SourceError(src, f"line {line_number}: column {name!r} holds {text[:40]}, "
                                  f"outside int64 ({INT64_MIN} to {INT64_MAX}), the integer "
                                  "type a TFRecord stores")
            return "int", FeatureSpec(name, FeatureKind.INT64, "int64", [], Encoding.VALUES)
        if self.is_float:
            if self.changed is not None:
                line_number, text, why = self.changed
                message = f"line {line_number}: column {name!r} holds {text[:40]}, which {why}"
                if self.is_int:
                    message += ("; the column's empty cells make it a float column (int64 has "
                                "no NaN): fill them to keep it int64")
                raise SourceError(src, message)
            if self.float32_keeps:
                return "float32", FeatureSpec(name, FeatureKind.FLOAT, "float32", [],
                                              Encoding.VALUES)
            # float64 as raw bytes, as NumPy float64 arrays are: exact, read by tf.io.decode_raw
            return "float64", FeatureSpec(name, FeatureKind.BYTES, "float64", [], Encoding.RAW)
        if self.numbers:
            line_number, text = self.first_text
            hint = ("if the labels are numbers, fix that cell" if label else
                    "if the column holds numbers, fix that cell (an empty cell becomes NaN)")
            logger.warning("%s: column %r is read as text: line %d holds %r after %d number(s); "
                           "%s", src, name, line_number, text[:40], self.numbers, hint)
        return "text", FeatureSpec(name, FeatureKind.BYTES, "string", [], Encoding.TEXT)


_CSV_CHUNK = 4096  # rows whose cells are typed together, column by column


def scan_csv(src: Path, *, label, skip_bad, max_size, quality, check) -> ScannedSource:
    rows = _csv_rows(src)
    try:
        _, _, header, _ = next(rows)
    except StopIteration:
        raise SourceError(src, "empty file: a CSV source needs a header row") from None
    header = [name.strip() for name in header]
    if any(not name for name in header):
        raise SourceError(src, f"line 1: empty column name in the header {header}")
    duplicates = sorted({name for name in header if header.count(name) > 1})
    if duplicates:
        raise SourceError(src, f"line 1: duplicate column names {duplicates}")
    label_key = choose_label(label, header, src, "column")
    label_column = header.index(label_key) if label_key is not None else None
    width = len(header)
    columns = [_Column(name) for name in header]
    label_values: list[str] = []
    items, sizes, skipped = [], [], []

    def bad(line_number: int, reason: str) -> None:
        if not skip_bad:
            raise SourceError(src, f"line {line_number}: {reason}")
        skipped.append(SkippedItem(f"{src}:{line_number}", reason))

    chunk_lines: list[int] = []
    chunk_rows: list[list[str]] = []

    def take_chunk() -> None:
        # a chunk of rows, transposed: one tuple of cells per column (none when empty)
        for column, texts in zip(columns, zip(*chunk_rows, strict=True), strict=False):
            column.see(chunk_lines, texts)
        chunk_lines.clear()
        chunk_rows.clear()

    for line_number, offset, fields, crc in rows:
        if not fields:
            continue  # blank line
        if len(fields) != width:
            reason = f"row at line {line_number} has {len(fields)} fields; the header has {width}"
            if not skip_bad:
                raise SourceError(src, reason)
            skipped.append(SkippedItem(f"{src}:{line_number}", reason))
            continue
        if label_column is not None and not fields[label_column]:
            bad(line_number, f"empty label: column {label_key!r} needs a value in every row")
            continue
        chunk_lines.append(line_number)
        chunk_rows.append(fields)
        if len(chunk_rows) == _CSV_CHUNK:
            take_chunk()
        if label_column is not None:
            label_values.append(fields[label_column])
        items.append((line_number, offset, crc))
        sizes.append(sum(map(len, fields)) + 4 * width)
    take_chunk()
    if not items:
        raise SourceError(src, "no data rows after the header")

    kinds, features = [], []
    for column in columns:
        kind, spec = column.feature(src, label=column.name == label_key)
        kinds.append(kind)
        features.append(spec)

    labels = class_names = None
    if label_key is not None:
        kind = kinds[label_column]
        if kind in ("float32", "float64"):
            # a regression target: a NaN or inf one would make the loss NaN
            keep = []
            for index, text in enumerate(label_values):
                if math.isfinite(float(text)):
                    keep.append(index)
                else:
                    bad(items[index][0], f"label {label_key!r} is {text.strip()}; a regression "
                        "target must be a finite number")
            if len(keep) < len(items):
                items = [items[index] for index in keep]
                sizes = [sizes[index] for index in keep]
                if not items:
                    raise SourceError(src, f"every label in column {label_key!r} is nan or inf")
        else:
            values = (np.asarray([int(v) for v in label_values], dtype=np.int64)
                      if kind == "int" else np.asarray(label_values, dtype=str))
            labels, class_names, features[label_column] = labels_from_values(
                values, label_key, src, features[label_column])
            if class_names is not None:
                kinds[label_column] = "class"
    return ScannedSource(
        kind=SourceKind.CSV, path=str(src), items=items, labels=labels, item_bytes=sizes,
        features=features, class_names=class_names, image_key=None, label_key=label_key,
        skipped=skipped,
        reader_config={"path": str(src), "header": header, "kinds": kinds,
                       "class_names": class_names},
    )


def csv_reader(config: dict):
    path = Path(config["path"])
    header = config["header"]
    kinds = config["kinds"]
    class_index = {name: i for i, name in enumerate(config["class_names"] or [])}

    def convert_field(kind: str, text: str):
        if kind == "int":
            return int(text)
        if kind in ("float32", "float64"):  # the writer stores the dtype; both parse as float64
            return float(text) if text != "" else math.nan
        if kind == "class":
            return class_index[text]
        return text.encode("utf-8")

    def read(item) -> dict:
        line_number, offset, crc = item
        try:
            row = next(_csv_rows(path, offset), None)
        except (SourceError, OSError):  # not UTF-8, malformed, gone: not the row the scan read
            row = None
        if row is None or row[3] != crc:
            # not a bad item to skip: the rest of the file may have changed too
            raise source_changed(path, f"line {line_number} is no longer the row the scan read "
                                 "(the file was written to)")
        fields = row[2]
        return {
            name: convert_field(kind, text)
            for name, kind, text in zip(header, kinds, fields, strict=True)
        }

    return read
