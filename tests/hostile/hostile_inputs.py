"""The hostile inputs: damaged and unusual images, NumPy files, CSV tables, shards, manifests
and interrupted conversions, each written at test time, and the tfopt command it meets.

Every case states what tfopt must do with it:

- ``refuse``: exit 1 with one ``tfopt: error:`` line, and nothing written at the destination;
- ``accept``: exit 0, and what it wrote verifies and reads back through TensorFlow;
- ``either``: a refusal or an acceptance as above (inputs TensorFlow itself may or may not
  take, where the promise is only "no crash, no unusable dataset");
- ``reject``: a damaged dataset that ``verify`` must fail (exit 1), never "every check passed".

The corpus is the test: ``test_hostile_corpus.py`` runs every case in a real process. Files
made unreadable by permissions are not in it, since the suite often runs as root, who reads
them anyway (and the corpus's size must not depend on who runs it):
tests/records/test_convert_hostile_files.py and test_verify.py try those where they can.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from conftest import GIF_1X1, encode_bmp

KINDS = ("refuse", "accept", "either", "reject")


@dataclass
class Case:
    name: str
    argv: list[str]  # tfopt's arguments
    expect: str  # one of KINDS
    dst: Path | None = None  # the dataset folder a convert writes
    records: int | None = None  # the records an accepted dataset must hold
    env: dict = field(default_factory=dict)
    # SIGKILL the command once this holds of dst (polled every 2 ms while it runs)
    kill_when: Callable[[Path], bool] | None = None
    then: list[list[str]] = field(default_factory=list)  # commands run after it, all exit 0


# --- images -------------------------------------------------------------------------------

def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return (struct.pack(">I", len(data)) + kind + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))


def png_of(width: int, height: int, *, color_type: int = 0, bit_depth: int = 8,
           row_fill: int = 0) -> bytes:
    """A valid PNG of one colour, of any size (deflated rows of one value are tiny)."""
    channels = {0: 1, 2: 3, 4: 2, 6: 4}[color_type]
    row = b"\0" + bytes([row_fill]) * (width * channels * bit_depth // 8)
    deflate = zlib.compressobj(6)
    stream = b"".join(deflate.compress(row) for _ in range(height)) + deflate.flush()
    header = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", header) + _png_chunk(b"IDAT", stream)
            + _png_chunk(b"IEND", b""))


def _sof_offset(jpeg: bytes) -> int:
    """Where the first start-of-frame marker (FFC0-FFCF but DHT, JPG, DAC) is."""
    at = 2
    while at < len(jpeg):
        marker = jpeg[at + 1]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            return at
        at += 2 + struct.unpack(">H", jpeg[at + 2:at + 4])[0]
    raise ValueError("no SOF marker")


def jpeg_with(jpeg: bytes, *, marker: int | None = None, precision: int | None = None,
              height: int | None = None, width: int | None = None) -> bytes:
    """A JPEG with its frame header edited: SOF type, sample precision or stated size."""
    data = bytearray(jpeg)
    at = _sof_offset(jpeg)
    if marker is not None:
        data[at + 1] = marker
    if precision is not None:
        data[at + 4] = precision
    if height is not None:
        data[at + 5:at + 7] = struct.pack(">H", height)
    if width is not None:
        data[at + 7:at + 9] = struct.pack(">H", width)
    return bytes(data)


def bmp_of(width: int, height: int) -> bytes:
    """A valid 24-bit BMP, all black."""
    return encode_bmp(np.zeros((height, width, 3), np.uint8))


def hostile_images(jpeg: bytes, png: bytes) -> dict[str, tuple[str, object, str]]:
    """name -> (file name in class folder "a", bytes or a special-file maker, expectation)."""
    huge_gray_png = png_of(20000, 20000)  # 400 MB of grey decodes to 1.2 GB of RGB
    return {
        "empty_jpeg": ("empty.jpg", b"", "refuse"),
        "text_as_jpeg": ("notes.jpg", b"not an image at all\n", "refuse"),
        "truncated_jpeg": ("cut.jpg", jpeg[: len(jpeg) // 2], "refuse"),
        "jpeg_soi_eoi_only": ("bare.jpg", b"\xff\xd8\xff\xd9", "refuse"),
        "jpeg_garbage_after_soi": ("junk.jpg", b"\xff\xd8" + os.urandom(300), "refuse"),
        "jpeg_claims_60000px": ("claims.jpg", jpeg_with(jpeg, height=60000, width=60000),
                                "refuse"),
        "jpeg_claims_zero_height": ("zero.jpg", jpeg_with(jpeg, height=0), "refuse"),
        "jpeg_12_bit": ("twelve.jpg", jpeg_with(jpeg, precision=12), "refuse"),
        "jpeg_lossless_sof3": ("lossless.jpg", jpeg_with(jpeg, marker=0xC3), "refuse"),
        "jpeg_arithmetic_sof9": ("arith.jpg", jpeg_with(jpeg, marker=0xC9), "either"),
        "jpeg_hierarchical_sof5": ("hier.jpg", jpeg_with(jpeg, marker=0xC5), "refuse"),
        "jpeg_flipped_bytes": ("flipped.jpg", _flip(jpeg, len(jpeg) // 2, 40), "either"),
        "jpeg_trailing_garbage": ("tail.jpg", jpeg + os.urandom(64), "either"),
        "png_bad_crc": ("crc.png", png[:-5] + bytes([png[-5] ^ 0xFF]) + png[-4:], "refuse"),
        "png_truncated": ("cut.png", png[: len(png) - 20], "refuse"),
        "png_signature_only": ("sig.png", png[:8], "refuse"),
        "png_20000px_one_colour": ("huge.png", huge_gray_png, "refuse"),
        "png_16_bit": ("deep.png", png_of(30, 20, color_type=2, bit_depth=16), "either"),
        "png_grey_alpha": ("ga.png", png_of(30, 20, color_type=4), "accept"),
        "png_rgba": ("rgba.png", png_of(30, 20, color_type=6, row_fill=200), "accept"),
        "png_as_jpg_name": ("really_png.jpg", png, "either"),
        "gif_1x1": ("tiny.gif", GIF_1X1, "either"),
        "gif_truncated": ("cut.gif", GIF_1X1[:20], "refuse"),
        "bmp_valid": ("plain.bmp", bmp_of(24, 16), "either"),
        "bmp_claims_huge": ("big.bmp", bmp_of(24, 16)[:18] + struct.pack("<ii", 60000, 60000)
                            + bmp_of(24, 16)[26:], "refuse"),
        "fifo_named_jpeg": ("pipe.jpg", os.mkfifo, "refuse"),
        "symlink_to_itself": ("loop.jpg", "self-link", "refuse"),
        "dangling_symlink": ("gone.jpg", "dangling-link", "refuse"),
        "folder_named_jpeg": ("folder.jpg", "folder", "either"),
        "unicode_file_name": ("ünï çødé 图.jpg", jpeg, "accept"),
        # Latin-1 bytes: Python's name for it holds a lone surrogate, which UTF-8 refuses
        "file_name_not_utf8": (os.fsdecode(b"caf\xe9 \xff.jpg"), jpeg, "accept"),
        "newline_in_file_name": ("two\nlines.jpg", jpeg, "accept"),
        "hidden_file": (".DS_Store", b"\0\0\0\1Bud1", "accept"),
    }


def _flip(data: bytes, at: int, count: int) -> bytes:
    out = bytearray(data)
    for i in range(at, min(at + count, len(out))):
        out[i] ^= 0x5A
    return bytes(out)


def _place(folder: Path, name: str, content) -> None:
    path = folder / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is os.mkfifo:
        os.mkfifo(path)
    elif content == "self-link":
        path.symlink_to(path.name)
    elif content == "dangling-link":
        path.symlink_to("no-such-file.jpg")
    elif content == "folder":
        path.mkdir()
    else:
        raise ValueError(content)


def good_image_folder(root: Path, jpeg: bytes, per_class: int = 2) -> Path:
    for name in ("a", "b"):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            (root / name / f"good{i}.jpg").write_bytes(jpeg)
    return root


def image_cases(root: Path, jpeg: bytes, png: bytes) -> list[Case]:
    cases = []
    for name, (file_name, content, expect) in hostile_images(jpeg, png).items():
        # a skip only changes what happens to a refused file
        for mode in ("raise", "skip") if expect != "accept" else ("raise",):
            src = good_image_folder(root / f"{name}-{mode}" / "src", jpeg)
            _place(src / "a", file_name, content)
            dst = src.parent / "dst"
            # a skip turns a refusal into an acceptance of the good images (and the hidden file
            # is ignored either way)
            if mode == "skip":
                expect_here, records = ("accept", 4) if expect == "refuse" else (expect, None)
            else:
                expect_here, records = expect, None
            if expect_here == "accept" and records is None:
                records = 5 if name not in ("hidden_file",) else 4
            cases.append(Case(f"image/{name}/{mode}",
                              ["convert", str(src), str(dst), "-q", "--workers", "1",
                               "--on-error", mode],
                              expect_here, dst=dst, records=records))
    return cases


def source_cases(root: Path, jpeg: bytes) -> list[Case]:
    """Whole sources and destinations that are not what convert expects."""
    cases = []

    def case(name, src, expect, dst=None, extra=()):
        dst = dst if dst is not None else root / name / "dst"
        cases.append(Case(f"source/{name}", ["convert", str(src), str(dst), "-q",
                                             "--workers", "1", *extra], expect, dst=dst))

    (root / "self_link").mkdir(parents=True)
    (root / "self_link" / "src").symlink_to("src")
    case("self_referential_source", root / "self_link" / "src", "refuse")
    case("dev_zero", "/dev/zero", "refuse")
    case("missing_source", root / "nowhere", "refuse")
    (root / "empty_folder" / "src").mkdir(parents=True)
    case("empty_folder", root / "empty_folder" / "src", "refuse")
    one_class = root / "one_class" / "src" / "only"
    one_class.mkdir(parents=True)
    (one_class / "x.jpg").write_bytes(jpeg)
    case("one_class_one_image", one_class.parent, "either")
    src = good_image_folder(root / "class_link_loop" / "src", jpeg)
    (src / "loop").symlink_to("loop")
    case("class_symlink_to_itself", src, "refuse")
    src = good_image_folder(root / "dst_is_file" / "src", jpeg)
    (src.parent / "file").write_text("I am a file\n")
    case("destination_is_a_file", src, "refuse", dst=src.parent / "file")
    src = good_image_folder(root / "dst_inside" / "src", jpeg)
    case("destination_inside_source", src, "either", dst=src / "a" / "out")
    src = good_image_folder(root / "bad_fraction" / "src", jpeg)
    case("val_fraction_one", src, "refuse", extra=("--val-fraction", "1"))
    case("val_fraction_negative", src, "refuse", extra=("--val-fraction", "-0.1"))
    case("val_fraction_nan", src, "refuse", extra=("--val-fraction", "nan"))
    case("shard_size_zero", src, "refuse", extra=("--shard-size", "0"))
    case("shards_negative", src, "refuse", extra=("--shards", "-3"))
    case("max_size_zero", src, "refuse", extra=("--max-size", "0"))
    case("quality_300", src, "refuse", extra=("--max-size", "8", "--quality", "300"))
    # nothing to resume: a fresh conversion is as good as a refusal
    case("resume_without_journal", src, "either", extra=("--resume",))
    existing = good_image_folder(root / "dst_exists" / "src", jpeg)
    (existing.parent / "dst").mkdir()
    (existing.parent / "dst" / "precious.txt").write_text("keep me\n")
    case("destination_not_empty", existing, "refuse", dst=existing.parent / "dst")
    return cases


# --- NumPy and CSV -------------------------------------------------------------------------

def numpy_cases(root: Path) -> list[Case]:
    cases = []
    rng = np.random.default_rng(3)

    def case(name, writer, expect, label="y", records=None):
        folder = root / name
        folder.mkdir(parents=True)
        src = writer(folder)
        cases.append(Case(f"numpy/{name}", ["convert", str(src), str(folder / "dst"), "-q",
                                            "--workers", "1", "--label", label],
                          expect, dst=folder / "dst", records=records))

    def npz(**arrays):
        def write(folder):
            np.savez(folder / "data.npz", **arrays)
            return folder / "data.npz"
        return write

    x = rng.normal(size=(12, 3)).astype(np.float32)
    y = np.arange(12) % 3
    case("valid", npz(x=x, y=y), "accept", records=12)
    case("object_array", npz(x=np.array([[1], "a", None] * 4, dtype=object), y=y), "refuse")
    case("lengths_disagree", npz(x=x[:7], y=y), "refuse")
    case("missing_label", npz(x=x, z=y), "refuse")
    case("nan_in_features", npz(x=np.full((12, 3), np.nan, np.float32), y=y), "either",
         records=12)
    case("float_labels", npz(x=x, y=y + 0.5), "either", records=12)
    case("zero_dimensional", npz(x=np.float32(3), y=np.int64(1)), "refuse")
    case("zero_rows", npz(x=x[:0], y=y[:0]), "refuse")
    case("complex_values", npz(x=x.astype(np.complex64), y=y), "refuse")
    case("structured_dtype", npz(x=np.zeros(12, dtype=[("a", "i4"), ("b", "f4")]), y=y),
         "refuse")
    case("unicode_strings", npz(x=np.array([f"s{i} é" for i in range(12)]), y=y), "accept",
         records=12)
    case("fortran_order", npz(x=np.asfortranarray(rng.normal(size=(12, 4))), y=y), "accept",
         records=12)
    case("uint64_over_int64", npz(x=np.full(12, 2**63 + 5, np.uint64), y=y), "refuse")

    def truncated(folder):
        np.save(folder / "x.npy", x)
        np.save(folder / "y.npy", y)
        raw = (folder / "x.npy").read_bytes()
        (folder / "x.npy").write_bytes(raw[: len(raw) - 10])
        return folder
    case("truncated_npy", truncated, "refuse")

    def not_npy(folder):
        (folder / "x.npy").write_text("hello")
        np.save(folder / "y.npy", y)
        return folder
    case("text_named_npy", not_npy, "refuse")

    def pickled(folder):
        np.save(folder / "x.npy", np.array([{"a": 1}] * 12, dtype=object), allow_pickle=True)
        np.save(folder / "y.npy", y)
        return folder
    case("pickled_npy", pickled, "refuse")

    def huge_header(folder):
        np.save(folder / "y.npy", y)
        header = "{'descr': '<f4', 'fortran_order': False, 'shape': (12, 3), }"
        header += " " * (70000 - len(header)) + "\n"
        (folder / "x.npy").write_bytes(b"\x93NUMPY\x02\x00" + struct.pack("<I", len(header))
                                       + header.encode() + x.tobytes())
        return folder
    case("huge_npy_header", huge_header, "either", records=12)

    def shape_lies(folder):
        np.save(folder / "y.npy", y)
        header = "{'descr': '<f4', 'fortran_order': False, 'shape': (12, 3000000), }"
        header += " " * (118 - len(header)) + "\n"
        (folder / "x.npy").write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header))
                                       + header.encode() + x.tobytes())
        return folder
    case("npy_shape_claims_more_than_file", shape_lies, "refuse")

    def corrupt_zip(folder):
        np.savez(folder / "data.npz", x=x, y=y)
        raw = bytearray((folder / "data.npz").read_bytes())
        raw[60:90] = bytes(30)
        (folder / "data.npz").write_bytes(bytes(raw))
        return folder / "data.npz"
    case("damaged_npz", corrupt_zip, "refuse")

    def rows_of_nothing(folder):
        # a header alone: 10**12 rows of shape (0,) need no data (a MemoryError once)
        with open(folder / "x.npy", "wb") as handle:
            np.lib.format.write_array_header_1_0(
                handle, {"descr": "<f4", "fortran_order": False, "shape": (10**12, 0)})
        return folder / "x.npy"
    case("npy_1e12_rows_of_zero_values", rows_of_nothing, "refuse", label="x")
    return cases


def csv_cases(root: Path) -> list[Case]:
    cases = []

    def case(name, text, expect, label="label", records=None, raw: bytes | None = None):
        folder = root / name
        folder.mkdir(parents=True)
        src = folder / "table.csv"
        src.write_bytes(raw if raw is not None else text.encode())
        cases.append(Case(f"csv/{name}", ["convert", str(src), str(folder / "dst"), "-q",
                                          "--workers", "1", "--label", label],
                          expect, dst=folder / "dst", records=records))

    rows = "".join(f"{i},{i * 0.5},name {i},{'ab'[i % 2]}\n" for i in range(10))
    header = "n,x,s,label\n"
    case("valid", header + rows, "accept", records=10)
    case("empty_number_cell", header + rows + "10,,s,a\n", "accept", records=11)  # NaN
    case("empty_label_cell", header + rows + "10,1.0,s,\n", "refuse")
    case("ragged_row", header + rows + "10,1.0\n", "refuse")
    case("extra_field", header + rows + "10,1.0,s,a,surplus\n", "refuse")
    case("missing_label_column", header + rows, "refuse", label="nope")
    case("header_only", header, "refuse")
    case("empty_file", "", "refuse")
    case("duplicate_header", "n,n,s,label\n" + rows, "refuse")
    case("not_utf8", None, "refuse", raw=(header + rows).encode() + b"11,1.0,\xff\xfe,a\n")
    case("byte_order_mark", "\ufeff" + header + rows, "accept", records=10)
    case("nul_byte", header + rows + "10,1.0,a\0b,a\n", "either")
    case("quoted_newline", header + rows + '10,1.0,"two\nlines",a\n', "accept", records=11)
    case("unterminated_quote", header + rows + '10,1.0,"open,a\n', "refuse")
    case("crlf_line_ends", (header + rows).replace("\n", "\r\n"), "accept", records=10)
    case("huge_field", header + rows + f"10,1.0,{'x' * 2_000_000},a\n", "either")
    case("int_overflow", header + rows + f"10{'9' * 30},1.0,s,a\n", "either")
    case("binary_garbage", None, "refuse", raw=bytes(range(256)) * 40)
    return cases


def table_cases(root: Path) -> list[Case]:
    """Parquet and HDF5 files (tfopt[parquet], tfopt[hdf5]: both in the test extra)."""
    import h5py
    import pyarrow as pa
    import pyarrow.parquet as pq

    cases = []

    def case(name, writer, expect, records=None, extra=()):
        folder = root / name
        folder.mkdir(parents=True)
        src = writer(folder)
        cases.append(Case(f"table/{name}", ["convert", str(src), str(folder / "dst"), "-q",
                                            "--workers", "1", "--label", "y", *extra],
                          expect, dst=folder / "dst", records=records))

    def parquet(table, name="data.parquet"):
        def write(folder):
            pq.write_table(table, folder / name, row_group_size=4)
            return folder / name
        return write

    y = pa.array([i % 2 for i in range(10)], pa.int64())
    good = pa.table({"x": pa.array([float(i) for i in range(10)]), "y": y})
    case("parquet_valid", parquet(good), "accept", records=10)
    case("parquet_null_value", parquet(pa.table({"x": pa.array([1.0, None] * 5), "y": y})),
         "refuse")
    case("parquet_null_value_skipped",
         parquet(pa.table({"x": pa.array([1.0, None] * 5), "y": y})), "accept", records=5,
         extra=("--on-error", "skip"))
    case("parquet_struct_column", parquet(pa.table({
        "x": pa.array([{"a": i} for i in range(10)]), "y": y})), "refuse")
    case("parquet_zoned_timestamp", parquet(pa.table({
        "x": pa.array(range(10), pa.timestamp("s", tz="Europe/Paris")), "y": y})), "refuse")
    case("parquet_missing_label", parquet(pa.table({"x": pa.array(range(10))})), "refuse")
    case("parquet_lists", parquet(pa.table({
        "x": pa.array([list(range(i)) for i in range(10)]), "y": y})), "accept", records=10)

    def truncated(folder):
        pq.write_table(good, folder / "data.parquet")
        raw = (folder / "data.parquet").read_bytes()
        (folder / "data.parquet").write_bytes(raw[: len(raw) // 2])
        return folder / "data.parquet"
    case("parquet_truncated", truncated, "refuse")

    def not_parquet(folder):
        (folder / "data.parquet").write_text("x,y\n1,2\n")
        return folder / "data.parquet"
    case("parquet_not_parquet", not_parquet, "refuse")

    def parts_disagree(folder):
        pq.write_table(good, folder / "part-0.parquet")
        pq.write_table(pa.table({"x": pa.array(["s"] * 10), "y": y}), folder / "part-1.parquet")
        (folder / "_SUCCESS").write_text("")
        return folder
    case("parquet_parts_disagree", parts_disagree, "refuse")

    def part_is_a_pipe(folder):
        pq.write_table(good, folder / "part-0.parquet")
        os.mkfifo(folder / "part-1.parquet")
        return folder
    case("parquet_part_is_a_pipe", part_is_a_pipe, "refuse")

    def part_links_to_itself(folder):
        pq.write_table(good, folder / "part-0.parquet")
        (folder / "part-1.parquet").symlink_to("part-1.parquet")
        return folder
    case("parquet_part_links_to_itself", part_links_to_itself, "refuse")

    def hdf5(**datasets):
        def write(folder):
            with h5py.File(folder / "data.h5", "w") as handle:
                for key, value in datasets.items():
                    handle[key] = value
            return folder / "data.h5"
        return write

    x = np.arange(30, dtype=np.float32).reshape(10, 3)
    case("hdf5_valid", hdf5(x=x, y=np.arange(10) % 2), "accept", records=10)
    case("hdf5_lengths_disagree", hdf5(x=x[:6], y=np.arange(10) % 2), "refuse")
    case("hdf5_missing_label", hdf5(x=x), "refuse")

    def object_refs(folder):
        with h5py.File(folder / "data.h5", "w") as handle:
            handle["y"] = np.arange(10) % 2
            refs = handle.create_dataset("x", (10,), dtype=h5py.ref_dtype)
            refs[0] = handle["y"].ref
        return folder / "data.h5"
    case("hdf5_reference_type", object_refs, "refuse")

    def h5_truncated(folder):
        hdf5(x=x, y=np.arange(10) % 2)(folder)
        raw = (folder / "data.h5").read_bytes()
        (folder / "data.h5").write_bytes(raw[: len(raw) // 3])
        return folder / "data.h5"
    case("hdf5_truncated", h5_truncated, "refuse")

    # reads outside the source: each points at another file, which must never be read
    def other_file(folder):
        with h5py.File(folder / "other.h5", "w") as handle:
            handle["x"] = x
            handle["g/x"] = x
            handle["g/y"] = np.arange(10) % 2
        return folder / "other.h5"

    def pointing(fill):
        def write(folder):
            other = other_file(folder)
            (folder / "secret.bin").write_bytes(b"not yours " * 12)
            with h5py.File(folder / "data.h5", "w") as handle:
                handle["y"] = np.arange(10) % 2
                fill(handle, other, folder)
            return folder / "data.h5"
        return write

    def virtual(source_name):
        def fill(handle, other, folder):
            layout = h5py.VirtualLayout(shape=(10, 3), dtype="f4")
            layout[:] = h5py.VirtualSource(str(folder / source_name), "x", shape=(10, 3))
            handle.create_virtual_dataset("x", layout, fillvalue=0)
        return fill

    case("hdf5_external_raw_storage", pointing(lambda h, other, folder: h.create_dataset(
        "x", (10, 12), dtype="u1", external=[(str(folder / "secret.bin"), 0, 120)])), "refuse")
    case("hdf5_external_link", pointing(
        lambda h, other, folder: h.__setitem__("x", h5py.ExternalLink(str(other), "/x"))),
        "refuse")
    case("hdf5_virtual_dataset", pointing(virtual("other.h5")), "refuse")
    # HDF5 zero-fills the rows of a missing source file without a word
    case("hdf5_virtual_dataset_source_missing", pointing(virtual("gone.h5")), "refuse")
    case("hdf5_group_is_external_link", pointing(
        lambda h, other, folder: h.__setitem__("g", h5py.ExternalLink(str(other), "/g"))),
        "refuse", extra=("--group", "g"))

    def soft_loop(folder):
        with h5py.File(folder / "data.h5", "w") as handle:
            handle["y"] = np.arange(10) % 2
            handle["a"] = h5py.SoftLink("/b")
            handle["b"] = h5py.SoftLink("/a")
        return folder / "data.h5"
    case("hdf5_soft_link_loop", soft_loop, "refuse")

    def unwritten_rows(folder):
        # chunks never written read as the fill value: 10**12 rows in a few KB
        with h5py.File(folder / "data.h5", "w") as handle:
            handle.create_dataset("x", (10**12,), dtype="f4", chunks=(4096,))
            handle.create_dataset("y", (10**12,), dtype="i1", chunks=(4096,))
        return folder / "data.h5"
    case("hdf5_1e12_unwritten_rows", unwritten_rows, "refuse")
    return cases


# --- damaged datasets ---------------------------------------------------------------------

def damage_cases(root: Path, pristine: Path) -> list[Case]:
    """A good dataset (``pristine``, one from ``convert``), damaged in one way per case: verify
    must fail each with exit 1."""
    cases = []

    def case(name, damage, expect="reject"):
        dataset = root / name
        shutil.copytree(pristine, dataset, symlinks=True)
        damage(dataset)
        cases.append(Case(f"dataset/{name}", ["verify", str(dataset), "-q"], expect))

    def shard(dataset):
        return sorted(dataset.glob("train-*.tfrecord"))[0]

    def manifest_edit(edit):
        def damage(dataset):
            path = dataset / "manifest.json"
            data = json.loads(path.read_text())
            edit(data)
            path.write_text(json.dumps(data))
        return damage

    def flip(dataset):
        path = shard(dataset)
        path.write_bytes(_flip(path.read_bytes(), path.stat().st_size // 2, 4))
    case("flipped_shard_bytes", flip)
    case("truncated_shard", lambda d: os.truncate(shard(d), shard(d).stat().st_size - 7))
    case("empty_shard", lambda d: os.truncate(shard(d), 0))
    case("deleted_shard", lambda d: shard(d).unlink())

    def huge_length(dataset):
        from tfopt.records.format.framing import masked_crc32c
        length = struct.pack("<Q", 2**36)
        path = shard(dataset)
        path.write_bytes(length + struct.pack("<I", masked_crc32c(length))
                         + path.read_bytes()[12:])
    case("record_length_2_pow_36", huge_length)

    def appended(dataset):
        path = shard(dataset)
        raw = path.read_bytes()
        length = struct.unpack("<Q", raw[:8])[0]
        path.write_bytes(raw + raw[: 16 + length])  # the first record again, at the end
    case("record_appended", appended)
    # without a manifest (and no journal) the folder is read as foreign TFRecords, split by its
    # file names, by the pipeline, inspect and verify alike (records/format/layout.py)
    case("manifest_deleted", lambda d: (d / "manifest.json").unlink(), "either")
    case("manifest_not_json", lambda d: (d / "manifest.json").write_text("{not json"))
    case("manifest_empty_object", lambda d: (d / "manifest.json").write_text("{}"))
    case("manifest_is_a_list", lambda d: (d / "manifest.json").write_text("[1, 2]"))

    def first_shard_entry(data):
        return data["splits"]["train"]["shards"][0]

    case("manifest_negative_count",
         manifest_edit(lambda m: first_shard_entry(m).__setitem__("num_records", -4)))
    case("manifest_count_one_less",
         manifest_edit(lambda m: first_shard_entry(m).__setitem__(
             "num_records", first_shard_entry(m)["num_records"] - 1)))
    case("manifest_shard_listed_twice",
         manifest_edit(lambda m: m["splits"]["train"]["shards"].append(first_shard_entry(m))))
    case("manifest_split_total_wrong",
         manifest_edit(lambda m: m["splits"]["train"].__setitem__(
             "num_records", m["splits"]["train"]["num_records"] + 3)))
    case("manifest_total_wrong",
         manifest_edit(lambda m: m["totals"].__setitem__("num_records", m["totals"]["num_records"] + 5)))
    case("manifest_class_names_short",
         manifest_edit(lambda m: m.__setitem__("class_names", m["class_names"][:1])))
    case("manifest_sha_wrong",
         manifest_edit(lambda m: first_shard_entry(m).__setitem__("sha256", "0" * 64)))
    case("manifest_path_escapes",
         manifest_edit(lambda m: first_shard_entry(m).__setitem__("file", "../../etc/passwd")))
    case("manifest_count_a_string",
         manifest_edit(lambda m: first_shard_entry(m).__setitem__("num_records", "many")))
    case("shard_replaced_by_folder", lambda d: (shard(d).unlink(), shard_folder(d)))
    return cases


def odd_path_cases(root: Path) -> list[Case]:
    """verify and inspect given what is not a dataset: each a one-line refusal."""
    root.mkdir(parents=True)
    os.mkfifo(root / "pipe.tfrecord")
    (root / "loop").symlink_to("loop")
    (root / "empty").mkdir()
    (root / "text.tfrecord").write_text("not records\n")
    paths = {"dev_zero": "/dev/zero", "named_pipe": root / "pipe.tfrecord",
             "link_to_itself": root / "loop", "missing": root / "nowhere",
             "empty_folder": root / "empty", "text_file": root / "text.tfrecord",
             "glob_matching_nothing": root / "none-*.tfrecord"}
    # verify reports a file of the wrong kind as a problem (a verdict), not an error line
    return [Case(f"path/{command}_{name}", [command, str(path)],
                 "reject" if (command, name) == ("verify", "text_file") else "refuse")
            for name, path in paths.items() for command in ("verify", "inspect")]


# --- record files that are not what they claim -----------------------------------------------

def record_file_cases(root: Path, pristine: Path) -> list[Case]:
    """A manifest and a backup record replaced by what a reader must not trust: a named pipe
    (would block a plain open), a link to /dev/zero (would fill the memory), JSON nested past
    the parser, values of the wrong type or past any date. Each is one line, never a hang, a
    traceback or a folder taken for one without a manifest."""
    root.mkdir(parents=True)
    cases = []

    def manifest(name, make):
        dataset = root / f"manifest_{name}"
        shutil.copytree(pristine, dataset, symlinks=True)
        path = dataset / "manifest.json"
        path.unlink()
        make(path)
        cases.append(Case(f"records/verify_manifest_{name}", ["verify", str(dataset), "-q"],
                          "reject"))
        cases.append(Case(f"records/inspect_manifest_{name}", ["inspect", str(dataset)],
                          "refuse"))

    nested = "[" * 200_000 + "]" * 200_000
    manifest("fifo", os.mkfifo)
    manifest("link_to_dev_zero", lambda path: path.symlink_to("/dev/zero"))
    manifest("nested_200000_deep", lambda path: path.write_text(nested))

    good = {"format": 3, "epoch": 1, "batch": 0, "weights": "weights-000001.weights.h5",
            "generation": 1, "sha256": "a" * 64, "size": 10, "time": 1764830000.5}

    def backup(name, make):
        workdir = root / f"backup_{name}"
        (workdir / "backup").mkdir(parents=True)
        (workdir / "backup" / "weights-000001.weights.h5").write_bytes(b"0123456789")
        make(workdir / "backup" / "latest.json")
        cases.append(Case(f"records/backups_latest_{name}", ["backups", str(workdir)],
                          "accept"))

    def record(**changes):
        return lambda path: path.write_text(json.dumps({**good, **changes}))

    backup("fifo", os.mkfifo)
    backup("link_to_dev_zero", lambda path: path.symlink_to("/dev/zero"))
    backup("nested_200000_deep", lambda path: path.write_text(nested))
    backup("epoch_1e400", lambda path: path.write_text(
        json.dumps(good).replace('"epoch": 1', '"epoch": 1e400')))
    backup("time_1e300", record(time=1e300))
    backup("epoch_a_string", record(epoch="three"))
    backup("weights_a_path_out", record(weights="../../etc/passwd"))
    backup("rng_not_pairs", record(rng=[[1, 2, 3]]))

    # a workdir whose name is not UTF-8, listed to a stdout that encodes strictly
    weights = b"0123456789"
    workdir = root / os.fsdecode(b"run-\xff")
    (workdir / "backup").mkdir(parents=True)
    (workdir / "backup" / "weights-000001.weights.h5").write_bytes(weights)
    (workdir / "backup" / "latest.json").write_text(json.dumps(
        {**good, "sha256": hashlib.sha256(weights).hexdigest()}))
    cases.append(Case("records/backups_of_a_folder_not_utf8_strict_stdout",
                      ["backups", str(workdir)], "accept", env=STRICT_UTF8))
    return cases


# --- numbers on the command line past any machine ------------------------------------------

def number_cases(root: Path) -> list[Case]:
    """Sizes and counts no machine holds: refused when parsed, never an OverflowError or a
    MemoryError after work began, and nothing written."""
    root.mkdir(parents=True)
    src = root / "src.npz"
    np.savez(src, x=np.zeros((4, 2), np.float32), y=np.zeros(4, np.int64))
    dst = root / "out"
    huge = "9" * 30
    return [
        Case("numbers/convert_shard_size_past_8_EiB", ["convert", str(src), str(dst),
                                                       "--shard-size", f"{huge}T"], "refuse",
             dst=dst),
        Case("numbers/convert_shard_size_1e400", ["convert", str(src), str(dst),
                                                  "--shard-size", "1e400"], "refuse", dst=dst),
        Case("numbers/analyze_ram_budget_inf", ["analyze", str(src), "--ram-budget", "inf"],
             "refuse"),
        Case("numbers/analyze_ram_budget_past_8_EiB", ["analyze", str(root),
                                                       "--ram-budget", f"{huge}G"], "refuse"),
        Case("numbers/demo_data_count_1e12", ["demo-data", str(root / "demo"), "--count",
                                              "1000000000000", "-q"], "refuse",
             dst=root / "demo"),
        Case("numbers/demo_data_count_past_int64", ["demo-data", str(root / "demo"), "--count",
                                                    huge, "-q"], "refuse", dst=root / "demo"),
        Case("numbers/profile_seconds_inf", ["profile", "--seconds", "inf", str(src)],
             "refuse"),
        Case("numbers/profile_steps_past_int64", ["profile", "--steps", huge, str(src)],
             "refuse"),
    ]


# --- names that are not UTF-8, and a locale that knows only ASCII ------------------------

# LANG=C with Python's UTF-8 mode and locale coercion off: file names beyond ASCII come as
# lone surrogates, stdout encodes ASCII only
ASCII_LOCALE = {"LANG": "C", "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
# stdout as in a real UTF-8 locale (en_US.UTF-8): strict, a lone surrogate cannot be written
STRICT_UTF8 = {"PYTHONIOENCODING": "utf-8:strict"}


def name_cases(root: Path, jpeg: bytes) -> list[Case]:
    """Class folders, files and dataset folders whose names are not UTF-8 (or not ASCII),
    converted, inspected and verified under a UTF-8 and an ASCII-only locale."""
    cases = []
    latin1, utf8 = os.fsdecode(b"caf\xe9"), "ünï 图"
    for label, env in (("utf8_locale", {}), ("ascii_locale", ASCII_LOCALE),
                       ("strict_stdout", STRICT_UTF8)):
        for name, class_name in (("class_folder_not_utf8", latin1),
                                 ("class_folder_beyond_ascii", utf8)):
            src = good_image_folder(root / f"{name}-{label}" / "src", jpeg)
            (src / class_name).mkdir()
            (src / class_name / os.fsdecode(b"\xff\xfe.jpg")).write_bytes(jpeg)
            dst = src.parent / "dst"
            cases.append(Case(f"names/{name}/{label}",
                              ["convert", str(src), str(dst), "--workers", "1"], "accept",
                              dst=dst, records=5, env=dict(env)))
    # a dataset in a folder of such a name: the reports print it
    pristine = good_image_folder(root / "named-src", jpeg)
    from tfopt.records.convert import convert
    for folder_name in (os.fsdecode(b"data\xff"), "datä 图"):
        dataset = root / folder_name
        convert(pristine, dataset, workers=1)
        for label, env in (("utf8_locale", {}), ("ascii_locale", ASCII_LOCALE),
                           ("strict_stdout", STRICT_UTF8)):
            shown = "not_utf8" if folder_name.startswith("data") else "beyond_ascii"
            for command in ("inspect", "verify"):
                cases.append(Case(f"names/{command}_dataset_folder_{shown}/{label}",
                                  [command, str(dataset)], "accept", env=dict(env)))
    return cases


# --- records that are not Examples TensorFlow parses, and manifests of impossible shapes ----

def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        out.append((value & 0x7F) | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def _features_of(example: bytes) -> bytes:
    """The Features message inside a serialized Example of one field 1 (what tfopt writes)."""
    assert example[0] == 0x0A
    length = shift = 0
    at = 1
    while True:
        byte = example[at]
        at += 1
        length |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return example[at:at + length]


def malformed_examples(good: bytes) -> dict[str, tuple[bytes, str]]:
    """name -> (a record made from the Example ``good``, "reject" where TensorFlow's parser or
    tfopt's readers refuse it); its CRCs are valid once framed."""
    def example(features: bytes) -> bytes:
        return b"\x0a" + _varint(len(features)) + features

    entry = b"\x0a\x05label"  # an entry's key, and no value
    return {
        "unknown_field_wire_type_7": (good + b"\x2f\x01", "reject"),
        "unknown_field_group": (good + b"\x2b\x08\x01\x2c", "reject"),
        "deep_groups": (good + b"\x2b" * 100_000 + b"\x2c" * 100_000, "reject"),
        "truncated_varint": (good + b"\x28\xff\xff", "reject"),
        "negative_length": (good + b"\x2a" + b"\xff" * 9 + b"\x01", "reject"),
        "length_past_the_end": (good[:-3], "reject"),
        "entry_without_value": (example(_features_of(good) + b"\x0a" + _varint(len(entry))
                                        + entry), "reject"),
        "unknown_field_inside_features": (example(_features_of(good) + b"\x10\x01"),
                                          "reject"),
        # TensorFlow's parser skips a top-level field an Example does not have, and its data;
        # inspect and the pipelines' schema sample refuse the record, and so does verify
        "unknown_varint_field": (good + b"\x28\x05", "reject"),
        "unknown_bytes_field": (good + b"\x32\x03abc", "reject"),
    }


def _replace_record(shard: Path, index: int, record: bytes) -> None:
    from tfopt.records.format.framing import RecordWriter, read_records

    records = list(read_records(shard))
    records[index] = record
    with RecordWriter(shard) as writer:
        for data in records:
            writer.write(data)


def _refresh_manifest(dataset: Path) -> None:
    """Sizes and checksums made to match the shards again: only the records tell."""
    from tfopt._files import sha256_file

    path = dataset / "manifest.json"
    data = json.loads(path.read_text())
    for split in data["splits"].values():
        for entry in split["shards"]:
            shard = dataset / entry["file"]
            entry["num_bytes"], entry["sha256"] = shard.stat().st_size, sha256_file(shard)
        split["num_bytes"] = sum(entry["num_bytes"] for entry in split["shards"])
    data["totals"]["num_bytes"] = sum(split["num_bytes"] for split in data["splits"].values())
    path.write_text(json.dumps(data))


def example_cases(root: Path, pristine: Path) -> list[Case]:
    """A good dataset with one record replaced (CRCs, sizes and checksums all matching), and
    the same record alone in a bare TFRecord file: verify fails what TensorFlow's parser
    refuses, naming the shard and record, and passes what it takes."""
    from tfopt.records.format.framing import read_records

    cases = []
    first_shard = sorted(pristine.glob("train-*.tfrecord"))[0]
    good = list(read_records(first_shard))[1]
    for name, (record, expect) in malformed_examples(good).items():
        dataset = root / name
        shutil.copytree(pristine, dataset, symlinks=True)
        shard = dataset / first_shard.name
        _replace_record(shard, 1, record)
        _refresh_manifest(dataset)
        cases.append(Case(f"example/{name}/dataset", ["verify", str(dataset), "-q"], expect))
        bare = root / f"{name}.tfrecord"
        shutil.copyfile(shard, bare)
        cases.append(Case(f"example/{name}/bare_file", ["verify", str(bare), "-q"], expect))

    def shape_edit(position: int, shape):
        def damage(dataset):
            path = dataset / "manifest.json"
            data = json.loads(path.read_text())
            data["features"][position]["shape"] = shape
            path.write_text(json.dumps(data))
        return damage

    for name, damage in (("manifest_shape_huge", shape_edit(2, [10**6, 10**6])),
                         ("manifest_shape_negative", shape_edit(2, [-1])),
                         ("manifest_shape_not_numbers", shape_edit(2, ["many"]))):
        dataset = root / name
        shutil.copytree(pristine, dataset, symlinks=True)
        damage(dataset)
        cases.append(Case(f"example/{name}", ["verify", str(dataset), "-q"], "reject"))
    return cases


def gzip_bomb_cases(root: Path) -> list[Case]:
    """2e7 empty records in a 606-KB GZIP file (320 MB of framing): inspect and verify give up
    after a run of records without features, in a second, instead of reading for a minute."""
    import zlib

    from tfopt.records.format.framing import frame

    root.mkdir(parents=True)
    path = root / "bomb.tfrecord.gz"
    deflate = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: a GZIP header and trailer
    block = frame(b"") * 100_000
    with open(path, "wb") as handle:
        for _ in range(200):
            handle.write(deflate.compress(block))
        handle.write(deflate.flush())
    return [Case("bomb/inspect_gzip_of_2e7_empty_records", ["inspect", str(path)], "refuse"),
            Case("bomb/verify_gzip_of_2e7_empty_records", ["verify", str(path)], "reject")]


def shard_folder(dataset: Path) -> None:
    # the name the deleted first shard had, now a folder
    name = json.loads((dataset / "manifest.json").read_text())["splits"]["train"]["shards"][0]
    (dataset / name["file"]).mkdir()


def interrupted_cases(root: Path, big_src: Path, records: int) -> list[Case]:
    """A convert killed with SIGKILL while writing its first shard, a middle one and the last.
    Whatever it left must not pass verify as a complete dataset, and ``--resume`` must finish
    it.

    The points are read off the output folder, not the clock: at fixed delays (0.4, 0.9 and
    1.6 s) the kills came before the first shard or after the last on this machine."""
    points = {f"while_writing_shard_{index}": _writing_shard(index) for index in (0, 6, 11)}
    cases = []
    for label, met in points.items():
        dst = root / label / "dst"
        dst.parent.mkdir(parents=True)
        argv = ["convert", str(big_src), str(dst), "-q", "--workers", "1", "--shards", "12"]
        cases.append(Case(f"killed/{label}", argv, "either", dst=dst, records=records,
                          kill_when=met,
                          then=[[*argv, "--resume"], ["verify", str(dst), "-q"]]))
    return cases


def _names(folder: Path) -> list[str]:
    try:
        return [entry.name for entry in folder.iterdir()]
    except OSError:  # not made yet
        return []


def _writing_shard(index: int) -> Callable[[Path], bool]:
    # a shard is written to a hidden temporary file, renamed into place when complete
    prefix = f".train-{index:05d}-of-"
    return lambda dst: any(name.startswith(prefix) for name in _names(dst))
