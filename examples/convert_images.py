"""Convert an image folder into verified TFRecord shards and look at what was written.

    python examples/convert_images.py PHOTOS_DIR SHARDS_DIR

PHOTOS_DIR is laid out as PHOTOS_DIR/<class>/<image>. Without arguments the script makes a
small demo folder first. Keep the `if __name__ == "__main__":` guard: convert writes shards in
spawned worker processes, which import this script again.
"""

from __future__ import annotations

import sys
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
    if len(sys.argv) == 3:
        main(Path(sys.argv[1]), Path(sys.argv[2]))
    else:
        workspace = Path(tempfile.mkdtemp(prefix="tfopt-example-"))
        tfopt.make_demo_data(workspace / "photos", count=300)
        main(workspace / "photos", workspace / "shards")
