"""Tuning commands: ``tfopt tune batch-size``."""

from __future__ import annotations

import os
import sys

import click

from tfopt.cli._common import (
    ByteSize,
    batch_size_list,
    echo_json,
    finite,
    json_option,
    needs_tensorflow,
)
from tfopt.models import MIN_IMAGE_SIZE, ModelName, ModelSize  # imports no TensorFlow

# The built-in models are the zoo's tiny ones (trials of seconds on a CPU), named by a spec so
# that isolated trials build them in their own processes.
_BUILTIN_SPEC = "tfopt.models:compiled_model"
_BUILTIN_SIZE = ModelSize.TINY.value
MIN_BUILTIN_IMAGE_SIZE = MIN_IMAGE_SIZE[ModelSize.TINY]
_DEFAULT_CLASSES = 10


def _classes_of(data) -> int:
    """The class count of a tfopt dataset (its manifest), for a built-in model's last layer."""
    from tfopt.records.manifest import read_manifest

    try:
        names = read_manifest(data).class_names
    except Exception:  # a glob or file list has no manifest: the pipeline reports real problems
        names = None
    return len(names) if names else _DEFAULT_CLASSES


@click.group("tune")
def tune():
    """Settings chosen by experiment on this machine."""


# Ranges are click types, checked before any work: the library checks --steps and --tolerance
# only when the sweep starts, after the finder's minutes.
@tune.command("batch-size")
@click.option("--model", "model_spec", metavar="MODULE:FUNCTION",
              help="A function that returns a compiled Keras model (the current folder is "
              "importable).")
@click.option("--builtin", type=click.Choice([name.value for name in ModelName]),
              help="A tiny built-in model instead [default: cnn when --model is not given].")
@click.option("--data", metavar="SHARDS",
              help="tfopt shards for the sweep [default: random uint8 images].")
@click.option("--image-size", type=click.IntRange(min=1), default=96, show_default=True,
              help="Image side, px, of the built-in models and of --data batches.")
@click.option("--max", "max_batch_size", type=click.IntRange(min=1), default=4096,
              show_default=True, help="Largest batch size tried.")
@click.option("--memory-budget", type=ByteSize(),
              help="Memory a step may use, standing in for GPU memory (e.g. 2GB) [default: "
              "half the RAM available on a CPU-only machine, none with a GPU].")
@click.option("--margin", type=click.FloatRange(0, 1, min_open=True), default=0.9,
              callback=finite, show_default=True, help="Fraction of the largest batch that fits to recommend.")
@click.option("--sweep", callback=batch_size_list, metavar="SIZES",
              help="Also time these batch sizes, e.g. 32,64,128.")
@click.option("--steps", type=click.IntRange(min=1), default=10, show_default=True,
              help="Timed steps per swept size.")
@click.option("--tolerance", type=click.FloatRange(0, 1, max_open=True), default=0.05,
              callback=finite, show_default=True,
              help="The sweep picks the smallest batch within this fraction of the best.")
@click.option("--find/--no-find", default=True, show_default=True,
              help="Search for the largest batch that fits.")
@click.option("--isolate", is_flag=True,
              help="Run each memory trial in a new process (safe after a real GPU OOM).")
@click.option("-q", "--quiet", is_flag=True, help="No per-trial lines on stderr.")
@json_option()
def batch_size(model_spec, builtin, data, image_size, max_batch_size, memory_budget, margin,
               sweep, steps, tolerance, find, isolate, quiet, as_json):
    """The largest batch size that fits, then (--sweep) the fastest one.

    Without --data the trials train on random uint8 images: memory depends only on the shapes,
    and the sweep then measures compute alone.
    """
    if model_spec and builtin:
        raise click.UsageError("give --model or --builtin, not both")
    if not find and not sweep:
        raise click.UsageError("--no-find needs --sweep: nothing to do otherwise")
    if not model_spec and (builtin or "cnn") == "cnn" and image_size < MIN_BUILTIN_IMAGE_SIZE:
        raise click.BadParameter(f"{image_size}: the built-in cnn needs at least "
                                 f"{MIN_BUILTIN_IMAGE_SIZE} px (it halves the image three times)",
                                 param_hint="'--image-size'")
    if "tensorflow" not in sys.modules:
        # TensorFlow's CPU allocator keeps complete memory statistics only in this mode; it
        # must be chosen before TensorFlow starts (docs/tune.md)
        os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "1")
    needs_tensorflow()
    if data:
        # opened before the finder's minutes: a source the sweep cannot read (missing, no
        # manifest, no images) would otherwise surface only when the sweep starts
        from tfopt.data.pipeline import PipelineBuilder

        PipelineBuilder(data, batch_size=1, training=True, image_size=image_size, repeat=True)
    from tfopt.tune.model import load_model_spec
    from tfopt.tune.search import find_batch_size
    from tfopt.tune.sweep import throughput_sweep

    if model_spec:
        spec, kwargs, name = model_spec, {}, model_spec
    else:
        builtin = builtin or "cnn"
        classes = _classes_of(data) if data else _DEFAULT_CLASSES
        spec = _BUILTIN_SPEC
        kwargs = {"name": builtin, "image_size": image_size, "classes": classes,
                  "size": _BUILTIN_SIZE}
        name = f"built-in {builtin} ({image_size}x{image_size}x3, {classes} classes)"

    def say(line):
        if not quiet:
            click.echo(line, err=True)

    # isolated trials build the model in their own processes; the sweep needs one here
    model = None if isolate and not sweep else load_model_spec(spec, **kwargs)
    found = None
    if find:
        say(f"finding the largest batch size for {name} (up to {max_batch_size}) ...")
        found = find_batch_size(
            spec if isolate else model, model_kwargs=kwargs, isolate=isolate,
            memory_budget="auto" if memory_budget is None else memory_budget,
            max_batch_size=max_batch_size, margin=margin,
            on_trial=lambda t: say(f"  batch {t.batch_size}: {'fits' if t.fits else 'no'}"
                                   f"{f' ({t.detail})' if t.detail else ''}"))
    result = None
    notes = []
    if sweep:
        sizes = sweep
        if found is not None:
            limit = found.largest_fit or 0
            sizes = [size for size in sweep if size <= limit]
            dropped = sorted(set(sweep) - set(sizes))
            if dropped:
                notes.append(f"not swept, larger than the largest batch that fits: "
                             f"{', '.join(map(str, dropped))}")
        dataset_fn = None
        if data:
            from tfopt.data.pipeline import build_pipeline

            # no cache: a few steps per size would only fill one in part (tf.data discards it,
            # with a C++ warning, when the iterator goes), and a size whose steps filled it
            # would be timed from memory while the others decode
            def dataset_fn(size):
                return build_pipeline(data, size, training=True, image_size=image_size,
                                      repeat=True, cache=False)
        if sizes:
            if data:
                notes.append("the sweep reads --data without tfopt's cache, so that every "
                             "batch size is timed decoding: a few steps per size would only "
                             "fill a cache in part, and a size that filled it would be timed "
                             "from memory")
            say(f"timing {steps} steps at batch sizes {', '.join(map(str, sizes))} ...")
            result = throughput_sweep(
                model, sizes, dataset_fn=dataset_fn, steps=steps, tolerance=tolerance,
                on_point=lambda p: say(f"  batch {p.batch_size}: "
                                       f"{p.examples_per_second:,.1f} examples/s"))
    data_note = data or "synthetic (random uint8 images of the model's input shape)"
    if as_json:
        echo_json({"model": name, "data": data_note,
                   "finder": found.to_json() if found else None,
                   "sweep": result.to_json() if result else None, "notes": notes})
        return
    click.echo(f"model: {name}")
    click.echo(f"data:  {data_note}")
    if found is not None:
        click.echo("")
        click.echo(found.describe())
    if result is not None:
        click.echo("")
        click.echo(result.describe())
    for note in notes:
        click.echo(f"note: {note}")


COMMANDS = [tune]
