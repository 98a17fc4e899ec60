"""The size arithmetic of a pipeline, pure: how far a JPEG decodes down, how large a decoded
image is, how many records files or a block of bytes hold.

Nothing here decides: the planner (:mod:`tfopt.data.plan`) chooses with these numbers, and the
decoder (:mod:`tfopt.data.decode`) runs the same scale choice in the graph. No TensorFlow.

Example:
    >>> jpeg_image_ratio(2092, 3057, 256), cache_side((224, 224))
    (8, 256)
"""

from __future__ import annotations

JPEG_RATIOS = (8, 4, 2)  # the DCT scalings TensorFlow's JPEG decoder offers, largest first

EVAL_CROP_FRACTION = 0.875  # central 87.5 %: the 224-of-256 convention
# The "resize 256, crop 224" margin of ImageNet training: decoded images kept in the cache
# stay at least this much larger than the target (reduced JPEG decoding stops there), and
# with random crops left to the device the pipeline ships squares with this margin.
CACHE_SCALE = 256 / 224
DEVICE_CROP_SCALE = CACHE_SCALE

# Bytes of TFRecord framing around each record: length (8), its CRC (4), the data's CRC (4).
RECORD_FRAMING_BYTES = 16

# Counting and parsing blocks hold about this many bytes (at least 8 records): enough to
# amortise a scan step or a parse call over small records, and no more, because each shard's
# first block (and the first parse) waits for all of its records. A fixed count of records
# would not do: a block of large records (photos) then spans much of a shard, and an
# evaluation's first batch waits for whole shards to be read.
BLOCK_BYTES = 1 << 20


def estimate_records(total_bytes: int, mean_record_bytes: float | None,
                     expansion: float | None = 1.0) -> int | None:
    """Records in TFRecord files of ``total_bytes``, from a sample's mean record size and the
    files' ``expansion`` (decompressed bytes per file byte: 1 for plain files); None without
    a sample or, for compressed files, an expansion."""
    if not expansion or not mean_record_bytes:
        return None
    return max(1, round(total_bytes * expansion / (mean_record_bytes + RECORD_FRAMING_BYTES)))


def records_per_block(mean_record_bytes: float, most: int) -> int:
    """Records in a counting or parsing block of about ``BLOCK_BYTES``, 8 to ``most``."""
    return int(min(most, max(8, BLOCK_BYTES // max(1.0, mean_record_bytes))))


def fill_batches(records: int, batch_size: int) -> int:
    """Batches a reader of a repeating pipeline takes, through one iterator, after which its
    cache is complete for certain: one element past the last record of the first pass, which
    makes the cache's input report its end. Fewer may do (read-ahead asks for more than the
    reader takes), but not for certain."""
    return records // batch_size + 1


def reduction_ratio(min_side: int | None, target: tuple[int, int]) -> int:
    """The largest JPEG scale-down (8, 4, 2) that keeps the image at least the target size."""
    if not min_side:
        return 1
    for ratio in JPEG_RATIOS:
        if min_side / ratio >= max(target):
            return ratio
    return 1


def jpeg_image_ratio(height: int, width: int, min_side: int) -> int:
    """The largest JPEG scale-down (8, 4, 2, else 1) that keeps this image's shorter side at
    least ``min_side``: what :func:`tfopt.data.decode.decode_jpeg_scaled` decodes it at.

    libjpeg rounds a scaled side up, ``ceil(side / ratio)``, and so does this.

    Example:
        >>> jpeg_image_ratio(2092, 3057, 256), jpeg_image_ratio(1500, 2000, 256)
        (8, 4)
    """
    shorter = min(height, width)
    for ratio in JPEG_RATIOS:
        if -(-shorter // ratio) >= min_side:
            return ratio
    return 1


def cache_side(target: tuple[int, int]) -> int:
    """Side of the square in which decoded images are cached for random crops."""
    return int(round(CACHE_SCALE * max(target)))


def device_crop_side(target: tuple[int, int]) -> int:
    """Side of the margin squares shipped when random crops of ``target`` are left to the
    device."""
    return int(round(DEVICE_CROP_SCALE * max(target)))


def model_side(output_size: tuple[int, int] | None, device_crop: bool) -> int | None:
    """The side of the images the model gets, from the ``output_size`` shipped: under device
    crops, the crops it draws from the margin squares; None for non-image data."""
    if output_size is None:
        return None
    side = max(output_size)
    return int(round(side / DEVICE_CROP_SCALE)) if device_crop else side


def mean_cached_image_bytes(*, encoding: str | None, side: int, mean_pixels: float | None,
                            min_side: int | None,
                            image_sizes: tuple[tuple[int, int], ...] = ()) -> float | None:
    """Mean bytes of one decoded image in a training cache of ``side``-px squares, at the scale
    it is decoded for it.

    Each JPEG goes into the cache at its own largest reduced scale that keeps ``side``
    (:func:`jpeg_image_ratio`): camera photos of 3,000 px for a 224-px model are decoded at 1/8
    or 1/4 scale, 64 or 16 times less memory than at full size. The mean is over the sampled
    images' sizes where given, else from their mean pixels at the smallest one's ratio (which
    overstates it); other formats decode whole. None when the image sizes are unknown.
    """
    if not mean_pixels:
        return None
    if encoding != "jpeg":
        return mean_pixels * 3
    if image_sizes:
        total = 0
        for height, width in image_sizes:
            ratio = jpeg_image_ratio(height, width, side)
            total += -(-height // ratio) * -(-width // ratio) * 3
        return total / len(image_sizes)
    ratio = reduction_ratio(min_side, (side, side))
    return mean_pixels / (ratio * ratio) * 3
