"""``tfopt demo-data``: a deterministic image-folder dataset made locally, nothing downloaded.

Two kinds. ``shapes`` (the default): ten classes of shapes and textures (circle, square, triangle, ring, cross, three stripe
directions, checkerboard, dots) in random colours, positions and sizes over a noisy gradient
background: easy enough that a small CNN learns it, hard enough that it has to look at the
pixels. Images are JPEGs of 320-480 px per side by default, the size range of photos that
``convert --max-size`` and the pipeline's random-resized-crop are built for. ``photos``:
camera-sized JPEGs (longer side 2,000-4,000 px, 4:3 or 3:2, landscape or portrait) with the
statistics of natural images: a 1/f amplitude spectrum (what makes real photos compress as they
do and decode as slowly), a class-specific colour cast and texture orientation, and
sensor-like grain; about 0.3 bytes a pixel at JPEG quality 90 (1.5-1.8 MB at 5-6 megapixels).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import enum
import functools
import os
import re
import shutil
import time
from pathlib import Path

import numpy as np

from tfopt._files import TEMP_MARKER, atomic_path, fsync_dir, temp_path_for
from tfopt._progress import Progress
from tfopt._spawn import worker_context
from tfopt._supervisor import start_failure
from tfopt._system import usable_cores
from tfopt._validate import choice, flag, optional_whole_number, whole_number
from tfopt.errors import InvalidArgumentError, OutputExistsError, TfoptError, WorkerStartError

MAX_DEMO_IMAGES = 10_000_000  # the work list is made up front: a bound keeps it in memory
CLASS_NAMES = ("circle", "square", "triangle", "ring", "cross",
               "hstripes", "vstripes", "diagonal", "checker", "dots")
# photo classes are named by their colour cast (each also has its own texture orientation)
PHOTO_CLASS_NAMES = ("amber", "azure", "crimson", "fern", "indigo",
                     "ochre", "rose", "slate", "teal", "violet")
_PHOTO_CASTS = ((1.15, 0.95, 0.70), (0.75, 0.95, 1.20), (1.25, 0.70, 0.70), (0.80, 1.15, 0.75),
                (0.75, 0.75, 1.20), (1.10, 1.00, 0.65), (1.20, 0.85, 0.95), (0.90, 0.95, 1.00),
                (0.70, 1.05, 1.05), (1.05, 0.75, 1.15))
_PHOTO_LOW_RES = 8  # the 1/f field is drawn at 1/8 of the photo's size and resized up
MAX_PHOTO_SIDE = 8192


class DemoKind(str, enum.Enum):
    """What ``tfopt demo-data`` draws."""

    SHAPES = "shapes"  # 320-480 px shapes and textures: quick, the classic demo
    PHOTOS = "photos"  # camera-sized photos with natural-image statistics


_DEFAULT_SIZES = {DemoKind.SHAPES: (320, 480), DemoKind.PHOTOS: (2000, 4000)}


@dataclasses.dataclass(frozen=True)
class DemoDataResult:
    """What ``make_demo_data`` wrote."""

    path: Path
    num_images: int
    class_names: list[str]
    num_bytes: int
    seconds: float

    def to_json(self) -> dict:
        return {"path": str(self.path), "images": self.num_images, "classes": self.class_names,
                "bytes": self.num_bytes, "seconds": round(self.seconds, 3)}


def _shape_mask(class_name: str, rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """A boolean mask of the class's pattern, placed and sized at random."""
    # open grids (H,1) and (1,W): broadcasting builds only the full-size masks
    yy = np.arange(height, dtype=np.float32)[:, None]
    xx = np.arange(width, dtype=np.float32)[None, :]
    side = min(height, width)
    radius = rng.uniform(0.18, 0.35) * side
    cy = rng.uniform(radius, height - radius)
    cx = rng.uniform(radius, width - radius)
    dy, dx = yy - cy, xx - cx
    period = rng.uniform(0.06, 0.12) * side
    if class_name == "circle":
        return dy**2 + dx**2 < radius**2
    if class_name == "square":
        return (np.abs(dy) < radius * 0.85) & (np.abs(dx) < radius * 0.85)
    if class_name == "triangle":
        return (dy < radius * 0.8) & (dy > -radius) & (np.abs(dx) < (dy + radius) * 0.6)
    if class_name == "ring":
        distance = np.sqrt(dy**2 + dx**2)
        return (distance < radius) & (distance > radius * 0.6)
    if class_name == "cross":
        arm = radius * 0.28
        inside = (np.abs(dy) < radius) & (np.abs(dx) < radius)
        return inside & ((np.abs(dy) < arm) | (np.abs(dx) < arm))
    if class_name == "hstripes":
        return np.sin(yy * 2 * np.pi / period) > 0
    if class_name == "vstripes":
        return np.sin(xx * 2 * np.pi / period) > 0
    if class_name == "diagonal":
        sign = rng.choice([-1.0, 1.0])
        return np.sin((yy + sign * xx) * np.pi / period) > 0
    if class_name == "checker":
        return (np.floor(yy / period) + np.floor(xx / period)) % 2 == 0
    if class_name == "dots":
        cell = period * 1.5
        ry, rx = (yy % cell) - cell / 2, (xx % cell) - cell / 2
        return ry**2 + rx**2 < (cell * 0.3) ** 2
    raise InvalidArgumentError(f"unknown demo class {class_name!r}")


def demo_image(class_index: int, image_index: int, seed: int = 0, min_size: int = 320,
               max_size: int = 480) -> np.ndarray:
    """One demo image as an ``(H, W, 3)`` uint8 array; the same arguments give the same pixels."""
    rng = np.random.default_rng([seed, class_index, image_index])
    height = int(rng.integers(min_size, max_size + 1))
    width = int(rng.integers(min_size, max_size + 1))
    yy = np.arange(height, dtype=np.float32)[:, None, None]
    xx = np.arange(width, dtype=np.float32)[None, :, None]
    start, end = rng.uniform(40, 215, size=(2, 3)).astype(np.float32)
    blend = (yy / height + xx / width) / 2
    background = start * (1 - blend) + end * blend
    foreground = rng.uniform(0, 255, size=3).astype(np.float32)
    # keep the pattern visible: its colour stays far from the background's mean colour
    while np.abs(foreground - (start + end) / 2).sum() < 150:
        foreground = rng.uniform(0, 255, size=3).astype(np.float32)
    mask = _shape_mask(CLASS_NAMES[class_index], rng, height, width)[..., None]
    image = np.where(mask, foreground, background)
    # sensor-like noise gives realistic JPEG sizes; a window of one shared noise tile costs a
    # slice, where fresh Gaussian noise per image would draw a number for every pixel
    tile = _noise_tile()
    top = int(rng.integers(0, tile.shape[0] - height + 1))
    left = int(rng.integers(0, tile.shape[1] - width + 1))
    image += tile[top : top + height, left : left + width]
    return np.clip(image, 0, 255).astype(np.uint8)


_NOISE_TILE_SIDE = 1024  # larger than any shapes image; 12 MiB of float32


def demo_photo(tf, class_index: int, image_index: int, seed: int = 0, min_size: int = 2000,
               max_size: int = 4000):
    """One demo photo as an ``(H, W, 3)`` uint8 tensor; the same arguments give the same
    pixels. ``min_size``/``max_size`` bound the longer side."""
    rng = np.random.default_rng([seed, 1_000 + class_index, image_index])
    longer = int(rng.integers(min_size, max_size + 1))
    shorter = int(round(longer / (4 / 3 if rng.random() < 0.5 else 3 / 2)))
    height, width = (shorter, longer) if rng.random() < 0.7 else (longer, shorter)
    low_h, low_w = -(-height // _PHOTO_LOW_RES), -(-width // _PHOTO_LOW_RES)
    # a 1/f amplitude spectrum (power ~ 1/f^2, as natural images have), stretched along the
    # class's orientation so that classes differ in texture, not only in colour
    fy = np.fft.fftfreq(low_h)[:, None]
    fx = np.fft.rfftfreq(low_w)[None, :]
    angle = np.pi * class_index / len(PHOTO_CLASS_NAMES)
    along = fx * np.cos(angle) + fy * np.sin(angle)
    across = -fx * np.sin(angle) + fy * np.cos(angle)
    frequency = np.sqrt((2.5 * along) ** 2 + across ** 2)
    frequency[0, 0] = 1.0
    fields = []
    for _ in range(2):  # luminance, and one chroma field
        spectrum = (rng.standard_normal(frequency.shape) + 1j * rng.standard_normal(
            frequency.shape)) / frequency
        spectrum[0, 0] = 0.0
        field = np.fft.irfft2(spectrum, s=(low_h, low_w))
        fields.append((field / (field.std() + 1e-9)).astype(np.float32))
    luminance, chroma = fields
    base = 128.0 + 42.0 * luminance[..., None]
    tint = np.array(_PHOTO_CASTS[class_index], np.float32)
    low = base * tint + 14.0 * chroma[..., None] * np.array([1.0, -0.5, -0.5], np.float32)
    image = tf.image.resize(low[None], (height, width), method="bicubic")[0]
    # sensor grain at full resolution (a window of the shared tile, tiled over the photo)
    tile = tf.constant(_noise_tile()[: _NOISE_TILE_SIDE // 2, : _NOISE_TILE_SIDE // 2] * 0.6)
    reps = (-(-height // tile.shape[0]), -(-width // tile.shape[1]), 1)
    image += tf.tile(tile, reps)[:height, :width]
    return tf.cast(tf.clip_by_value(tf.round(image), 0, 255), tf.uint8)


@functools.lru_cache(maxsize=1)
def _noise_tile() -> np.ndarray:
    rng = np.random.default_rng(20261130)
    return rng.standard_normal((_NOISE_TILE_SIDE, _NOISE_TILE_SIDE, 3), dtype=np.float32) * 12


# what demo-data writes in a class folder: "<index in class>.jpg" (5 digits, more past 99999),
# and the temporary name it writes each under first
_IMAGE_NAME = re.compile(rf"\d{{5,}}\.jpg|\.\d{{5,}}\.jpg{re.escape(TEMP_MARKER)}\d+")


def _not_demo_images(dst: Path) -> list[str]:
    """The entries of ``dst`` that demo-data did not write, relative to it, sorted.

    Its output is recognised by its layout (there is no marker file): class folders named as in
    ``CLASS_NAMES`` holding only its image files.
    """
    foreign = []
    for entry in sorted(dst.iterdir()):
        if (entry.name not in CLASS_NAMES + PHOTO_CLASS_NAMES or entry.is_symlink()
                or not entry.is_dir()):
            foreign.append(entry.name)
            continue
        foreign.extend(f"{entry.name}/{item.name}" for item in sorted(entry.iterdir())
                       if not _IMAGE_NAME.fullmatch(item.name) or item.is_symlink()
                       or not item.is_file())
    return foreign


_CHUNK = 50  # images per task in the worker pool: progress often, tasks cheap to hand out
_PHOTO_CHUNK = 4  # photos are far slower to make than the small images: a few per task


def _write_images(dst: str, names: list[str], indices: range, seed: int, min_size: int,
                  max_size: int, kind: str = DemoKind.SHAPES.value) -> int:
    """Write the demo images with these global indices; return the bytes written."""
    from tfopt._tf import import_tensorflow

    tf = import_tensorflow()

    total = 0
    for index in indices:
        class_index = index % len(names)
        folder = Path(dst) / names[class_index]
        folder.mkdir(parents=True, exist_ok=True)
        if kind == DemoKind.PHOTOS.value:
            pixels = demo_photo(tf, class_index, index // len(names), seed, min_size, max_size)
        else:
            pixels = demo_image(class_index, index // len(names), seed, min_size, max_size)
        data = tf.io.encode_jpeg(pixels, quality=90).numpy()
        final = folder / f"{index // len(names):05d}.jpg"
        # renamed into place so no half-written image ever carries a final name; no fsync per
        # image: demo data is made again in seconds, and an fsync each would slow it down
        with atomic_path(final, durable=False) as temporary:
            temporary.write_bytes(data)
        total += len(data)
    return total


def _write_in_processes(workers: int, bar, chunks, dst: str, names: list[str], seed: int,
                        min_size: int, max_size: int, kind: str) -> int:
    """:func:`_write_images` of every chunk in ``workers`` processes; the bytes written.

    The processes do not import the caller's main module (``worker_context``): a script
    without an ``if __name__ == "__main__":`` guard, or one read from stdin, works.

    Raises:
        tfopt.errors.WorkerStartError: The processes cannot start here.
        tfopt.TfoptError: One died (killed, out of memory).
    """
    try:
        pool = concurrent.futures.ProcessPoolExecutor(workers, mp_context=worker_context())
    except (OSError, NotImplementedError) as error:  # no semaphores here (/dev/shm)
        raise _cannot_start(error) from None
    total = 0
    processes = None  # the pool's processes, once it broke
    with pool:
        try:
            futures = {}
            for chunk in chunks:
                try:  # submit starts the processes
                    futures[pool.submit(_write_images, dst, names, chunk, seed, min_size,
                                        max_size, kind)] = len(chunk)
                except OSError as error:  # fork or exec refused (process limit, memory)
                    pool.shutdown(wait=True, cancel_futures=True)  # what started stops
                    raise _cannot_start(error) from None
            for future in concurrent.futures.as_completed(futures):
                total += future.result()
                bar.update(futures[future])
        except concurrent.futures.process.BrokenProcessPool:
            processes = list((getattr(pool, "_processes", None) or {}).values())
    if processes is None:
        return total
    for process in processes:
        process.join()  # the pool has stopped them all: each is reaped, or is at once
    code = start_failure(processes)
    if code is not None:
        raise WorkerStartError(
            f"the demo-data worker processes cannot start here (one ended with exit code "
            f"{code}; its own error, if any, is printed above): run again with --workers 1 "
            "(workers=1) to draw the images in this process")
    raise TfoptError("a demo-data worker process died (killed, or out of memory?): run again, "
                     "with fewer --workers (workers=) if memory is short")


def _cannot_start(error: BaseException) -> WorkerStartError:
    reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
    return WorkerStartError(f"cannot start the demo-data worker processes ({reason}): run "
                            "again with --workers 1 (workers=1) to draw the images in this "
                            "process")


def _move_into_place(filled: Path, final: Path, class_names) -> None:
    """Rename the filled temporary folder to ``final`` (absent, or an empty folder)."""
    try:
        os.replace(filled, final)  # rename(2) also replaces an empty folder
    except OSError:
        # ``final`` is an empty mount point (it cannot be renamed over): move the classes in
        for name in class_names:
            os.replace(filled / name, final / name)
        filled.rmdir()
    fsync_dir(final.parent)


def make_demo_data(dst, count: int = 3000, classes: int = 10, seed: int = 0,
                   min_size: int | None = None, max_size: int | None = None,
                   overwrite: bool = False, workers: int | None = None,
                   progress: bool | None = False, kind: str = "shapes") -> DemoDataResult:
    """Write a deterministic image-folder dataset ``dst/<class>/<index>.jpg``.

    The same arguments give the same files, whatever ``workers`` is.

    Args:
        dst: The folder to create. A new folder appears under this name only once every
            image is written.
        count: Total images, split evenly over the classes. Defaults to 3000.
        classes: Number of classes, 2 to 10. Defaults to 10.
        seed: Changes every image. Defaults to 0.
        min_size: Smallest side in pixels (for photos: of the longer side). Defaults to 320
            for shapes, 2000 for photos.
        max_size: Largest side in pixels (for photos: of the longer side). Defaults to 480 for
            shapes, 4000 for photos.
        overwrite: Replace the demo images an earlier run wrote in ``dst``; they stay until the
            new ones are complete. A folder holding anything else is refused, as convert
            refuses to mix a dataset with files it did not write. Defaults to False.
        workers: Processes drawing images. Defaults to the number of usable cores.
        progress: Progress bar on stderr (None: when stderr is a terminal). Defaults to False.
        kind: ``"shapes"`` or ``"photos"`` (see the module docstring). Defaults to "shapes".

    Raises:
        tfopt.InvalidArgumentError: An argument of the wrong type or out of range.
        tfopt.OutputExistsError: ``dst`` holds files demo-data did not write, or demo images and
            ``overwrite`` is False.

    Example:
        >>> make_demo_data("demo/images", count=200).num_images
        200
    """
    kind = choice(DemoKind, kind, "kind")
    classes = whole_number(classes, "classes", 2, maximum=len(CLASS_NAMES))
    count = whole_number(count, "count", classes,
                         f"an int >= classes ({classes}): at least one image per class, and "
                         f"at most {MAX_DEMO_IMAGES:,} (a demo folder, not a dataset)",
                         maximum=MAX_DEMO_IMAGES)
    largest = _NOISE_TILE_SIDE if kind is DemoKind.SHAPES else MAX_PHOTO_SIDE
    default_min, default_max = _DEFAULT_SIZES[kind]
    min_size = whole_number(default_min if min_size is None else min_size, "min_size", 16,
                            maximum=largest)
    max_size = whole_number(max(default_max, min_size) if max_size is None else max_size,
                            "max_size", min_size, maximum=largest,
                            expected=f"an int from min_size ({min_size}) to {largest}")
    seed = whole_number(seed, "seed", 0)  # NumPy's generators take no negative seeds
    workers = optional_whole_number(workers, "workers", 1,
                                    "an int >= 1, or None for all usable cores")
    overwrite = flag(overwrite, "overwrite")
    dst = Path(dst)
    if dst.exists() and not dst.is_dir():
        raise OutputExistsError(f"{dst}: exists and is not a folder")
    replaced = dst.exists() and any(dst.iterdir())
    if replaced:
        foreign = _not_demo_images(dst)
        if foreign:
            raise OutputExistsError(
                f"{dst}: holds files demo-data did not write ({', '.join(foreign[:3])}"
                f"{', ...' if len(foreign) > 3 else ''}); refusing to mix demo images with them: "
                "choose an empty or new folder")
        if not overwrite:
            raise OutputExistsError(f"{dst}: is not empty (demo images of an earlier run); pass "
                                    "--overwrite to replace them")
    # the images are written into a temporary folder beside the destination and moved in once
    # every one is there: an interrupted run leaves no folder that looks like a whole dataset
    # (convert would take it for one). An earlier run's images (--overwrite) are swapped out
    # only then, so none of theirs mixes with the new ones
    final = Path(os.path.realpath(dst)) if dst.exists() else dst  # a link to it stays one
    old = temp_path_for(final.with_name(f"{final.name}.old"))  # the earlier images, while swapped
    target = temp_path_for(final)
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as error:  # a parent is a file, or not writable: before any worker starts
        raise TfoptError(f"{dst}: cannot create the output folder ({error.strerror}); "
                         "choose a folder that can be created") from None
    workers = workers or usable_cores()
    started = time.perf_counter()
    names = list((CLASS_NAMES if kind is DemoKind.SHAPES else PHOTO_CLASS_NAMES)[:classes])
    chunk_size = _CHUNK if kind is DemoKind.SHAPES else _PHOTO_CHUNK
    chunks = [range(start, min(start + chunk_size, count))
              for start in range(0, count, chunk_size)]
    total_bytes = 0
    try:
        with Progress(count, "demo-data", unit="img",
                      enabled=progress) as bar:
            if workers <= 1 or len(chunks) == 1:
                for chunk in chunks:
                    total_bytes += _write_images(str(target), names, chunk, seed, min_size,
                                                 max_size, kind.value)
                    bar.update(len(chunk))
            else:
                total_bytes += _write_in_processes(
                    min(workers, len(chunks)), bar, chunks, str(target), names, seed, min_size,
                    max_size, kind.value)
        if replaced:
            os.replace(final, old)
        _move_into_place(target, final, names)
    except BaseException:
        if replaced and old.exists() and not final.exists():
            os.replace(old, final)  # stopped between the two renames: the earlier images stay
        shutil.rmtree(target, ignore_errors=True)
        raise
    if replaced:
        shutil.rmtree(old)
    return DemoDataResult(dst, count, names, total_bytes, time.perf_counter() - started)
