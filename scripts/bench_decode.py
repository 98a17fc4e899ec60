"""The first epoch's decode ceiling: what one image costs Keras's folder loader and tfopt's
decoded-cache fill, on one core.

    python scripts/bench_decode.py FOLDER [--count 60] [--rounds 7] [--image-size 224]

A first epoch decodes every stored image once, whatever the pipeline, so on a decode-bound
corpus (camera photos) its speed-up over ``keras.utils.image_dataset_from_directory`` can be no
more than the ratio of their per-image decode costs. This times, per image, in CPU seconds of
one core (the process is pinned to it), rounds alternating between the variants:

- ``keras``: what ``image_dataset_from_directory`` does per file: ``decode_image`` at full size,
  then a bilinear resize to ``--image-size``;
- ``full``: ``decode_jpeg`` at full size;
- ``1/8``: ``decode_jpeg(ratio=8)``, the cheapest decode libjpeg offers;
- ``tfopt``: what tfopt's decoded cache stores: each JPEG at its own largest reduced scale that
  keeps its shorter side >= the target x 256/224 (``decode_jpeg_scaled``).

It prints each variant's median and ``keras / tfopt``, the most any pipeline that fills
tfopt's cache can gain over Keras in a first epoch (reading, parsing and cropping come on top),
and ``keras / 1/8``, the most any decoder of these JPEGs can.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from tfopt._tf import import_tensorflow


def variants(tf, image_size: int) -> dict:
    from tfopt.data.decode import decode_jpeg_scaled
    from tfopt.data.sizes import cache_side

    side = cache_side((image_size, image_size))
    return {
        "keras": tf.function(lambda d: tf.image.resize(
            tf.io.decode_image(d, channels=3, expand_animations=False),
            (image_size, image_size))),
        "full": tf.function(lambda d: tf.io.decode_jpeg(d, channels=3)),
        "1/8": tf.function(lambda d: tf.io.decode_jpeg(d, channels=3, ratio=8)),
        "tfopt": tf.function(lambda d: decode_jpeg_scaled(d, side)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a folder of JPEGs (searched recursively)")
    parser.add_argument("--count", type=int, default=60, help="images timed (default 60)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds (default 7)")
    parser.add_argument("--image-size", type=int, default=224, help="model side (default 224)")
    args = parser.parse_args()
    files = sorted(p for p in args.folder.rglob("*")
                   if p.suffix.lower() in (".jpg", ".jpeg"))[:args.count]
    if not files:
        raise SystemExit(f"{args.folder}: no .jpg or .jpeg files found")
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core: CPU time per image
    tf = import_tensorflow()  # after the arguments are checked: a mistake is told at once
    encoded = [tf.constant(p.read_bytes()) for p in files]
    fns = variants(tf, args.image_size)
    for fn in fns.values():
        fn(encoded[0])  # trace before timing
    per_image = {name: [] for name in fns}
    for _ in range(args.rounds):
        for name, fn in fns.items():
            start = time.process_time()
            for data in encoded:
                fn(data)
            per_image[name].append((time.process_time() - start) / len(encoded))
    megabytes = sum(len(p.read_bytes()) for p in files) / len(files) / 1e6
    print(f"{len(files)} JPEGs of {megabytes:.2f} MB on average, {args.rounds} rounds, one core")
    median = {name: statistics.median(times) for name, times in per_image.items()}
    for name, times in per_image.items():
        print(f"  {name:>6}: {median[name] * 1e3:6.1f} ms CPU an image "
              f"({min(times) * 1e3:.1f}-{max(times) * 1e3:.1f})")
    print(f"keras / tfopt: {median['keras'] / median['tfopt']:.2f}x  (the most a first epoch "
          f"filling tfopt's cache gains over Keras here)")
    print(f"keras / 1/8:   {median['keras'] / median['1/8']:.2f}x  (the most any decoder of "
          f"these JPEGs gains)")


if __name__ == "__main__":
    main()
