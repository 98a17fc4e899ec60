"""Convert an image folder into verified TFRecord shards and look at what was written.

    python examples/convert_images.py PHOTOS_DIR SHARDS_DIR
    python examples/convert_images.py [--demo-images N]

PHOTOS_DIR is laid out as PHOTOS_DIR/<class>/<image>. Without them the script makes a small
demo folder first (300 images, or N) in a new temporary folder, and converts that.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import tfopt


def main(photos: Path, shards: Path) -> None:
    result = tfopt.convert(
        photos,
        shards,
        val_fraction=0.1,  # a stratified validation split
        max_size=320,  # store at about 1.4x a 224-px training crop: later epochs decode less
        on_error="skip",  # skip unreadable images, listing each one in the manifest
        overwrite=True,
        progress=None,  # a progress bar when stderr is a terminal
    )
    print(f"{result.num_records} records in {result.seconds:.1f} s "
          f"({result.records_per_second:.0f} records/s)")
    for item in result.manifest.skipped:
        print(f"skipped {item.path}: {item.reason}")

    info = tfopt.inspect(shards, fast=True)
    print(info.describe())

    check = tfopt.verify(shards)
    print("verified" if check.ok else "\n".join(map(str, check.problems)))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("photos", nargs="?", type=Path, help="PHOTOS_DIR/<class>/<image>")
    parser.add_argument("shards", nargs="?", type=Path, help="the dataset folder to write")
    parser.add_argument("--demo-images", type=int, default=300,
                        help="images of the demo folder made without PHOTOS_DIR [default: 300]")
    args = parser.parse_args()
    if args.photos is not None and args.shards is not None:
        main(args.photos, args.shards)
    elif args.photos is not None:
        parser.error("give both PHOTOS_DIR and SHARDS_DIR, or neither (demo images)")
    else:
        workspace = Path(tempfile.mkdtemp(prefix="tfopt-example-"))
        tfopt.make_demo_data(workspace / "photos", count=args.demo_images)
        main(workspace / "photos", workspace / "shards")
