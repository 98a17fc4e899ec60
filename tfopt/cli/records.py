"""Dataset commands: demo-data, convert, inspect, verify."""

from __future__ import annotations

import signal
from pathlib import Path

import click

from tfopt._signals import Terminated, signals_raise
from tfopt.cli._common import (
    ByteSize,
    echo_json,
    echo_text,
    fail,
    human_bytes,
    json_option,
    needs_tensorflow,
    table,
)
from tfopt.records.image_limits import DEFAULT_MAX_PIXELS
from tfopt.records.manifest import MANIFEST_NAME

_INT64_MAX = (1 << 63) - 1  # TensorFlow's take() counts records in int64
_SKIPPED_SHOWN = 5  # skipped items named on the terminal; the manifest lists every one
_quiet = click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
_json = json_option()


@click.command("demo-data")
@click.argument("dst", type=click.Path(file_okay=False))
@click.option("--count", default=3000, show_default=True, help="Number of images.")
@click.option("--classes", default=10, show_default=True, help="Number of classes (2-10).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Changes every image.")
@click.option("--kind", type=click.Choice(["shapes", "photos"]), default="shapes",
              show_default=True,
              help="shapes: 320-480 px shapes and textures; photos: camera-sized photos "
                   "(longer side 2000-4000 px) with natural-image statistics.")
@click.option("--min-size", type=int, default=None,
              help="Smallest image side, px (photos: of the longer side) [default: 320, "
                   "photos 2000].")
@click.option("--max-size", type=int, default=None,
              help="Largest image side, px (photos: of the longer side) [default: 480, "
                   "photos 4000].")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Processes [default: all cores].")
@click.option("--overwrite", is_flag=True,
              help="Replace the demo images of an earlier run (nothing else).")
@_quiet
@_json
def demo_data(dst, count, classes, seed, kind, min_size, max_size, workers, overwrite, quiet,
              as_json):
    """Make a deterministic demo image folder (JPEGs, one class per folder)."""
    from tfopt.records.demo_data import make_demo_data

    needs_tensorflow()

    result = make_demo_data(dst, count=count, classes=classes, seed=seed, min_size=min_size,
                            max_size=max_size, overwrite=overwrite, workers=workers,
                            progress=None if not quiet else False, kind=kind)
    if as_json:
        echo_json(result.to_json())
        return
    click.echo(f"wrote {result.num_images} images in {len(result.class_names)} classes "
               f"({human_bytes(result.num_bytes)}) to {result.path} in {result.seconds:.1f} s")


@click.command("convert")
@click.argument("src", type=click.Path())
@click.argument("dst", type=click.Path(file_okay=False))
@click.option("--from", "source_format",
              type=click.Choice(["images", "numpy", "csv", "parquet", "hdf5"]),
              help="Source kind [default: detected from SRC].")
@click.option("--label", help="Column (CSV, Parquet), array (NumPy) or dataset (HDF5) holding "
                              "the label.")
@click.option("--group", help="HDF5: the group whose datasets are converted [default: the root].")
@click.option("--shard-size", type=ByteSize(), default="128MiB", show_default=True,
              help="Target shard size, e.g. 64MB.")
@click.option("--shards", type=int, help="Number of training shards (overrides --shard-size).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Shuffle and split seed.")
@click.option("--val-fraction", default=0.0, show_default=True,
              help="Fraction of records for a validation split (stratified by class).")
@click.option("--compression", type=click.Choice(["none", "gzip"]), default="none",
              show_default=True)
@click.option("--workers", type=click.IntRange(min=1),
              help="Shard-writing processes [default: all cores].")
@click.option("--max-size", type=int, help="Downscale images whose longer side exceeds this.")
@click.option("--quality", default=90, show_default=True, help="JPEG quality of downscaled images.")
@click.option("--max-pixels", type=click.IntRange(min=1), default=DEFAULT_MAX_PIXELS,
              show_default=True,
              help="Refuse images of more pixels (height x width) than this, read from the "
                   "header before decoding; the default is the largest RGB JPEG TensorFlow "
                   "decodes whole.")
@click.option("--check", type=click.Choice(["structure", "decode"]), default="structure",
              show_default=True,
              help="Image check: the structure, judged as TensorFlow's decoder would (fast), "
                   "or a decode.")
@click.option("--on-error", type=click.Choice(["raise", "skip"]), default="raise",
              show_default=True, help="Stop at a bad item, or skip it and record it.")
@click.option("--overwrite", is_flag=True,
              help="Replace the dataset in DST, once the new one is complete.")
@click.option("--resume", is_flag=True,
              help="Finish an interrupted conversion into DST (--overwrite too).")
@_quiet
@_json
def convert(src, dst, quiet, as_json, **options):
    """Convert an image folder, NumPy arrays, CSV, Parquet or HDF5 into sharded TFRecords."""
    try:
        # from the command's first line (its imports take a second) to the process's end: a
        # Ctrl-C, or SIGTERM, is answered once; another while the workers stop, or while the
        # process exits, is ignored, as it would cut that short and print a traceback
        with signals_raise({signal.SIGINT: KeyboardInterrupt, signal.SIGTERM: Terminated},
                           exiting=True):
            from tfopt.records.convert import convert as run_convert
            from tfopt.records.convert.options import ConvertOptions

            result = run_convert(src, dst, ConvertOptions(**options),
                                 progress=None if not quiet else False)
    except KeyboardInterrupt as interrupt:
        # one line (logged by convert once it writes, else this one), no traceback and no
        # click "Aborted!"; the shell's exit code of a process that the signal ended: 130 for
        # Ctrl-C, 143 for SIGTERM
        signum = signal.SIGTERM if isinstance(interrupt, Terminated) else signal.SIGINT
        what = "stopped by SIGTERM" if signum == signal.SIGTERM else "interrupted"
        reported = getattr(interrupt, "tfopt_reported", False)
        fail(None if reported else what,
             f"{what}: finished shards are kept; run again with --resume" if reported else what,
             128 + signum)
    summary = result.to_json()
    if as_json:
        echo_json(summary)
        return
    rows = [[name, split["records"], split["shards"], human_bytes(split["bytes"])]
            for name, split in summary["splits"].items()]
    rows.append(["total", summary["records"], sum(s["shards"] for s in summary["splits"].values()),
                 human_bytes(summary["bytes"])])
    echo_text(table(rows, ["split", "records", "shards", "bytes"]))
    echo_text(f"{summary['seconds']:.1f} s, {summary['records_per_second']:,.0f} records/s"
               f"; skipped {summary['skipped']}; resumed shards {summary['resumed_shards']}")
    skipped = result.manifest.skipped
    for item in skipped[:_SKIPPED_SHOWN]:
        click.echo(f"skipped: {item.path}: {item.reason}", err=True)
    if skipped:
        more = (f"the other {len(skipped) - _SKIPPED_SHOWN:,} and these"
                if len(skipped) > _SKIPPED_SHOWN else "each")
        click.echo(f"skipped: {more} are listed with the reason under \"skipped\" in "
                   f"{Path(result.path) / MANIFEST_NAME}", err=True)
    echo_text(f"dataset: {result.path}")


@click.command("inspect")
@click.argument("path")
@click.option("--fast", is_flag=True, help="Take record counts from the manifest.")
@click.option("--sample", type=click.IntRange(1, _INT64_MAX), default=64, show_default=True,
              help="With --fast: records read to infer the schema, spread over every shard "
                   "(otherwise every record is read and counts).")
@_quiet
@_json
def inspect(path, fast, sample, quiet, as_json):
    """Show the schema, record count and shards of any TFRecord dataset."""
    from tfopt.records.inspect import inspect as run_inspect

    result = run_inspect(path, fast=fast, sample=sample, progress=None if not quiet else False)
    if as_json:
        echo_json(result.to_json())
        return
    echo_text(result.describe())


@click.command("verify")
@click.argument("path")
@click.option("--workers", type=click.IntRange(min=1),
              help="Shards checked at once [default: all cores].")
@_quiet
@_json
def verify(path, workers, quiet, as_json):
    """Check every shard's checksum, size, record count and record CRCs."""
    from tfopt.records.verify import verify as run_verify

    result = run_verify(path, workers=workers, progress=None if not quiet else False)
    if as_json:
        echo_json(result.to_json())
    else:
        echo_text(result.describe())
    raise SystemExit(0 if result.ok else 1)


COMMANDS = [demo_data, convert, inspect, verify]
