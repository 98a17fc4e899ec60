"""Image folders, ``SRC/<class>/<image>``: one record per image, its class folder the label.

Each image is first judged by its header (:mod:`tfopt.records.image_limits`): what TensorFlow
refuses to decode, or more pixels than ``max_pixels``, is refused before anything is decoded.
Then, with ``check="structure"``, each is judged as TensorFlow's decoder would judge it, without
decoding it (:mod:`tfopt.records.image_structure`: JPEG markers and image data, PNG chunks and
inflated data, GIF records and LZW data, BMP header and size), but for rare cases only a decode
settles; ``"decode"`` decodes every image (JPEGs at 1/8 scale). Images beyond ``max_size`` are
downscaled and re-encoded as JPEG. Only decoding imports TensorFlow, in the process that meets
such an image.

Example:
    >>> scanned = scan_images(Path("photos"), label=None, skip_bad=False, max_size=None,
    ...                       quality=90, check="structure")
    >>> scanned.class_names
    ['cat', 'dog']
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import stat
from pathlib import Path

from tfopt._tf_messages import short_tf_message
from tfopt.errors import InvalidArgumentError, SourceError
from tfopt.records.image_header import IMAGE_EXTENSIONS, ImageFormat, image_size, sniff_format
from tfopt.records.image_limits import DEFAULT_MAX_PIXELS, header_problem
from tfopt.records.image_structure import structure_verdict
from tfopt.records.manifest import SkippedItem
from tfopt.records.schema import (
    IMAGE_FILENAME_KEY,
    IMAGE_FORMAT_KEY,
    IMAGE_HEIGHT_KEY,
    IMAGE_KEY,
    IMAGE_WIDTH_KEY,
    LABEL_KEY,
    Encoding,
    FeatureKind,
    FeatureSpec,
)
from tfopt.records.sources.paths import (
    UnreadableFile,
    is_folder,
    is_utf8_name,
    list_folder,
    not_regular,
    path_status,
    read_regular_file,
    shown_name,
    stat_problem,
)
from tfopt.records.sources.shared import BadItem, ScannedSource, SourceKind

logger = logging.getLogger("tfopt")


def scan_images(src: Path, *, label, skip_bad, max_size, quality, check,
                max_pixels=DEFAULT_MAX_PIXELS) -> ScannedSource:
    if label is not None:
        raise InvalidArgumentError(
            f"label {label!r}: the labels of an image folder come from its class folders; "
            "a label name applies to NumPy and CSV sources only"
        )
    items, labels, sizes, skipped = [], [], [], []
    escaped: list[str] = []  # names that are not UTF-8, as the manifest shows them
    stamp = hashlib.sha256()

    def bad(where: str, reason: str) -> None:
        where = shown_name(str(where))  # a name that is not UTF-8 must reach the manifest too
        if not skip_bad:
            raise SourceError(where, reason)
        skipped.append(SkippedItem(where, reason))

    class_dirs, stray = _top_level(src, bad)
    if not class_dirs:
        # detect_kind sends every folder without .npy files here: say what both kinds need
        found = f"; it holds {len(stray)} other file(s), e.g. {stray[0]}" if stray else ""
        raise SourceError(src, "neither .npy files nor class folders of images in it: a folder "
                          "source holds .npy arrays (one per feature) or is an image folder "
                          f"laid out as SRC/<class>/<image>{found}")

    unlisted = set()  # folders that could not be listed (permissions): not called empty

    def cannot_list(error: OSError) -> None:
        unlisted.add(str(error.filename))
        bad(str(error.filename), stat_problem(error.filename, error))

    for class_index, class_dir in enumerate(class_dirs):
        found = 0
        for root, dirs, files in os.walk(class_dir.path, onerror=cannot_list):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(files):
                if name.startswith("."):
                    continue  # .DS_Store and friends
                path = Path(root, name)
                if path.suffix.lower() not in IMAGE_EXTENSIONS:
                    allowed = ", ".join(sorted(IMAGE_EXTENSIONS))
                    bad(str(path), f"not an image file (extension {path.suffix!r}; expected one of {allowed})")
                    continue
                # stat, never open: a named pipe would block open() for good, a device can
                # stream without end
                try:
                    status = path_status(path)
                except UnreadableFile as error:
                    bad(str(path), error.reason)
                    continue
                if not stat.S_ISREG(status.st_mode):
                    bad(str(path), not_regular(status.st_mode))
                    continue
                size = status.st_size
                relative = str(path.relative_to(src))
                if not is_utf8_name(relative):
                    escaped.append(shown_name(relative))
                # the name's own bytes: one that is not UTF-8 has no UTF-8 encoding
                stamp.update(os.fsencode(relative)
                             + f"\0{size}\0{status.st_mtime_ns}\n".encode())
                items.append((relative, class_index))
                labels.append(class_index)
                sizes.append(size)
                found += 1
        if not found and class_dir.path not in unlisted:
            bad(class_dir.path, "empty class folder: no images in it")
    if not items:
        raise SourceError(src, "no images found in its class folders")

    features = [
        FeatureSpec(IMAGE_KEY, FeatureKind.BYTES, "uint8", None, Encoding.JPEG),
        FeatureSpec(IMAGE_FORMAT_KEY, FeatureKind.BYTES, "string", [], Encoding.TEXT),
        FeatureSpec(IMAGE_HEIGHT_KEY, FeatureKind.INT64, "int64", [], Encoding.VALUES),
        FeatureSpec(IMAGE_WIDTH_KEY, FeatureKind.INT64, "int64", [], Encoding.VALUES),
        FeatureSpec(IMAGE_FILENAME_KEY, FeatureKind.BYTES, "string", [], Encoding.TEXT),
        FeatureSpec(LABEL_KEY, FeatureKind.INT64, "int64", [], Encoding.VALUES),
    ]
    # class names are text in the manifest and in every report: one that is not UTF-8 is
    # kept with its other bytes written \xNN (and listed), so two names can meet only there
    class_names = [shown_name(entry.name) for entry in class_dirs]
    escaped[:0] = [name for entry, name in zip(class_dirs, class_names, strict=True)
                   if not is_utf8_name(entry.name)]
    if len(set(class_names)) < len(class_names):
        clash = next(name for name in class_names if class_names.count(name) > 1)
        raise SourceError(src, f"two class folders are both named {clash!r} once their "
                          "bytes that are not UTF-8 are written \\xNN; rename one")
    return ScannedSource(
        kind=SourceKind.IMAGES, path=str(src), items=items, labels=labels, item_bytes=sizes,
        features=features, class_names=class_names, escaped_names=escaped,
        image_key=IMAGE_KEY, label_key=LABEL_KEY, skipped=skipped,
        reader_config={"root": str(src), "max_size": max_size, "quality": quality,
                       "check": check, "max_pixels": max_pixels},
        content_stamp=stamp.hexdigest(),
    )


def _top_level(src: Path, bad) -> tuple[list[os.DirEntry], list[str]]:
    """The class folders of ``src`` and the names of the files beside them (ignored).

    A link there that cannot be followed (it loops, or points nowhere) might be a class folder
    or a stray file: it is a bad item either way, named. Named pipes and devices beside the
    class folders are ignored as stray files are, and never opened.
    """
    try:
        entries = [entry for entry in list_folder(src) if not entry.name.startswith(".")]
    except UnreadableFile as unreadable:
        raise SourceError(src, unreadable.reason) from None
    class_dirs, stray = [], []
    for entry in entries:
        if is_folder(entry.path):
            class_dirs.append(entry)
            continue
        try:
            path_status(entry.path)
        except UnreadableFile as unreadable:
            bad(entry.path, unreadable.reason)
            continue
        stray.append(entry.name)
    if stray:
        logger.warning("%s: ignoring %d file(s) outside class folders, e.g. %s",
                       src, len(stray), stray[0])
    return class_dirs, stray


# Bytes read from the start of a file to find its size: JPEG headers (EXIF thumbnails, ICC
# profiles) come before the frame header and can run to tens of KB.
_HEADER_BYTES = 256 << 10


def sampled_image_sides(scanned: ScannedSource, samples: int = 32) -> list[tuple[int, int]]:
    """``(shorter, longer)`` sides of up to ``samples`` images spread over the source, read
    from their headers (unreadable ones are left out: the conversion reports those)."""
    root = Path(scanned.path)
    step = max(1, len(scanned.items) // samples)
    sides = []
    for relative, _ in scanned.items[::step][:samples]:
        path = root / relative
        if not path.is_file():  # a FIFO would block open()
            continue
        try:
            with open(path, "rb") as handle:
                height, width = image_size(handle.read(_HEADER_BYTES))
        except (OSError, ValueError):
            continue
        sides.append((min(height, width), max(height, width)))
    return sides


# TensorFlow, imported at the first image that needs a real decode (check="decode", a
# downscale, the rare image its structure cannot vouch for), in the process that meets it;
# None until then.
_tf = None
_tf_threads: int | None = None


def single_threaded_decodes() -> None:
    """Make the TensorFlow this process may import later run each op on one thread.

    For convert's worker processes (one shard each, eager per-image ops: thread pools would
    only contend); the main process keeps TensorFlow's defaults.
    """
    global _tf_threads
    _tf_threads = 1


def _tensorflow(path: Path, why: str):
    global _tf
    if _tf is None:
        from tfopt._tf import import_tensorflow

        try:
            tf = import_tensorflow()
        except ImportError as error:
            raise SourceError(str(path), f"{why} needs TensorFlow, which cannot be imported "
                              f"here ({error}); with --check structure, only rare images need it") from None
        if _tf_threads is not None:
            try:
                tf.config.threading.set_intra_op_parallelism_threads(_tf_threads)
                tf.config.threading.set_inter_op_parallelism_threads(_tf_threads)
            except RuntimeError:  # TensorFlow ran ops in this process already: keep its pools
                pass
        _tf = tf
    return _tf


def _is_decode_error(error: BaseException) -> bool:
    return _tf is not None and isinstance(error, _tf.errors.OpError)


def image_reader(config: dict):
    root = Path(config["root"])
    max_size = config["max_size"]
    quality = config["quality"]
    check = config["check"]
    max_pixels = config["max_pixels"]

    def read(item) -> dict:
        relative, label = item
        path = root / relative
        try:
            # the scan saw a regular file; a pipe put there since must not block the worker
            data = read_regular_file(path)
        except UnreadableFile as error:
            raise BadItem(str(path), error.reason) from None
        if not data:
            raise BadItem(str(path), "empty file")
        image_format = sniff_format(data)
        if image_format is None:
            raise BadItem(str(path), f"not a JPEG, PNG, GIF or BMP image (starts with {data[:8]!r})")
        try:
            height, width = image_size(data, image_format)
        except ValueError as error:
            raise BadItem(str(path), f"malformed {image_format.value} header: {error}") from None
        # from the header, before any decode or inflate: a refused image costs no memory
        problem = header_problem(data, image_format, height, width, max_pixels=max_pixels)
        if problem:
            raise BadItem(str(path), problem)
        try:
            if max_size and max(height, width) > max_size:
                data, height, width = _downscale(_tensorflow(path, "downscaling"), data, max_size, quality)
                image_format = ImageFormat.JPEG
            elif check == "structure":
                verdict = structure_verdict(data, image_format, decoder_loaded=_tf is not None)
                if verdict.problem:
                    raise BadItem(str(path),
                                  f"cannot be decoded, truncated or corrupt ({verdict.problem})")
                if verdict.decode_reason:  # only a decode can tell
                    _check_decodes(_tensorflow(path, verdict.decode_reason), data, image_format,
                                   height, width)
            else:
                _check_decodes(_tensorflow(path, "--check decode"), data, image_format, height,
                               width)
        except (BadItem, SourceError):
            raise
        except Exception as error:
            if not _is_decode_error(error):
                raise
            reason = short_tf_message(error)
            raise BadItem(str(path), f"cannot be decoded, truncated or corrupt ({reason})") from None
        return {
            IMAGE_KEY: data,
            IMAGE_FORMAT_KEY: image_format.value.encode(),
            IMAGE_HEIGHT_KEY: height,
            IMAGE_WIDTH_KEY: width,
            IMAGE_FILENAME_KEY: relative.encode("utf-8", "surrogateescape"),
            LABEL_KEY: label,
        }

    return read


def _check_decodes(tf, data: bytes, image_format: ImageFormat, height: int, width: int) -> None:
    """Decode once to prove the image is whole (``check="decode"``, and the images a structure
    check cannot vouch for).

    JPEGs decode at 1/8 scale: the entropy-coded data is still read to the end (so truncation and
    corrupt segments are caught) but the inverse DCT and colour conversion, most of the cost,
    run on 1/64 of the pixels, so the check costs well below a full decode.
    """
    if image_format is ImageFormat.JPEG:
        decoded = tf.io.decode_jpeg(data, ratio=8)
        expected = (math.ceil(height / 8), math.ceil(width / 8))
    else:
        decoded = tf.io.decode_image(data, expand_animations=False)
        expected = (height, width)
    if tuple(decoded.shape[:2]) != expected:
        raise tf.errors.InvalidArgumentError(
            None, None, f"decoded size {tuple(decoded.shape[:2])} does not match the header's"
        )


def _downscale(tf, data: bytes, max_size: int, quality: int) -> tuple[bytes, int, int]:
    """Shrink an image so its longer side is ``max_size``, keep the aspect ratio, JPEG it."""
    image = tf.io.decode_image(data, channels=3, expand_animations=False)
    height, width = int(image.shape[0]), int(image.shape[1])
    scale = max_size / max(height, width)
    new_size = (max(1, round(height * scale)), max(1, round(width * scale)))
    # antialias: without it, downscaling by 2x or more aliases fine textures
    resized = tf.image.resize(image, new_size, method="bilinear", antialias=True)
    resized = tf.cast(tf.clip_by_value(tf.round(resized), 0, 255), tf.uint8)
    encoded = tf.io.encode_jpeg(resized, quality=quality, chroma_downsampling=True)
    return encoded.numpy(), new_size[0], new_size[1]
