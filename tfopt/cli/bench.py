"""Benchmark commands: ``tfopt bench pipeline``, ``tfopt bench train``."""

from __future__ import annotations

import click

from tfopt.cli._common import batch_size_list, echo_json, json_option, needs_tensorflow, plot_path
from tfopt.models import MIN_IMAGE_SIZE, ModelName, ModelSize  # imports no TensorFlow


@click.group("bench")
def bench():
    """Throughput benchmarks: tfopt beside the plain TensorFlow way, in one run."""


def _worker_counts(ctx, param, value):
    if not value:
        return ()
    # imported here, not at the top: the service's modules would slow every other tfopt
    # command's start-up
    from tfopt.bench.service_workers import MAX_SERVICE_WORKERS  # noqa: PLC0415 - no TF
    try:
        counts = tuple(int(part) for part in value.split(","))
    except ValueError:
        counts = ()
    if not counts or not all(0 <= count <= MAX_SERVICE_WORKERS for count in counts):
        raise click.BadParameter(f"{value!r}: expected comma-separated worker counts from 0 to "
                                 f"{MAX_SERVICE_WORKERS}, such as 0,1,2")
    return counts


# Checked here, before any work: the library checks them too, but only once the benchmark (or,
# for bench train, the demo data) has run for a minute or more.
_POSITIVE = click.IntRange(min=1)


@bench.command("pipeline")
@click.argument("path")
@click.option("--batch-size", type=_POSITIVE, default=64, show_default=True)
@click.option("--image-size", type=_POSITIVE, default=224, show_default=True,
              help="Output side, px.")
@click.option("--training/--eval", default=True, show_default=True,
              help="Random-resized crops and shuffling, or central crops.")
@click.option("--epochs", type=_POSITIVE, default=1, show_default=True,
              help="Passes per run; later passes show what caching does.")
@click.option("--repeats", type=_POSITIVE, default=3, show_default=True,
              help="Alternating runs per method.")
@click.option("--cache", type=click.Choice(["auto", "on", "off"]), default="auto",
              show_default=True, help="tfopt's cache setting; under auto, runs of one pass "
              "or less in all go without it (it would serve none of it), as tfopt.Run does.")
@click.option("--max-batches", type=_POSITIVE,
              help="Cap on full batches per epoch (quick runs) [default: an epoch is one "
                   "pass].")
@click.option("--split", help="Manifest split [default: train with --training, validation "
              "with --eval].")
@click.option("--tfopt-source", help="tfopt reads this copy instead (e.g. stored with "
              "convert --max-size): compares it with the others on PATH.")
@click.option("--methods", help="Comma-separated methods, in alternation order, from naive, "
              "guide, keras-folder, tfopt, tfopt-device, limit [default: all of them; "
              "keras-folder only where there is an image folder].")
@click.option("--images", type=click.Path(exists=True, file_okay=False),
              help="The image folder the shards were converted from, for keras-folder "
              "(image_dataset_from_directory) [default: the one the manifest names].")
@click.option("--service-workers", callback=_worker_counts, metavar="N,N,...",
              help="Also run tfopt's pipeline through a tf.data service with these numbers of "
              "workers, e.g. 0,1,2 (0: in-process, the tfopt method): a dispatcher and the "
              "workers start as local processes on localhost and stop after the run. They "
              "share this host's cores, so the figures show the service's overhead and scaling "
              "here, not a multi-host speed-up.")
@click.option("-q", "--quiet", is_flag=True, help="No per-run lines on stderr.")
@json_option()
def pipeline(path, batch_size, image_size, training, epochs, repeats, cache, max_batches, split,
             tfopt_source, methods, images, service_workers, quiet, as_json):
    """Examples/s of naive, guide, Keras's folder loader, tfopt and the decode limit."""
    needs_tensorflow()
    from tfopt.bench.pipeline import BenchSettings, run_pipeline_bench

    if tfopt_source:
        # the benchmark opens it only at tfopt's first turn, after the other methods' runs
        from tfopt.data.pipeline import PipelineBuilder

        PipelineBuilder(tfopt_source, batch_size=batch_size, training=training,
                        image_size=image_size, split=split, repeat=True)

    settings = BenchSettings(
        source=path, batch_size=batch_size, image_size=image_size, training=training,
        epochs=epochs, repeats=repeats, cache={"auto": "auto", "on": True, "off": False}[cache],
        max_batches=max_batches, split=split, tfopt_source=tfopt_source,
        service_workers=service_workers, images=images)
    progress = None if quiet else (lambda line: click.echo(line, err=True))
    chosen = methods and [method.strip() for method in methods.split(",") if method.strip()]
    report = run_pipeline_bench(settings, chosen or None, progress=progress)
    if as_json:
        echo_json(report.to_json())
    else:
        click.echo(report.describe())


@bench.command("train")
@click.argument("shards", required=False)
@click.option("--model", type=click.Choice([name.value for name in ModelName]), default="cnn",
              show_default=True,
              help="Built-in model: a small ResNet-style CNN or an MLP.")
@click.option("--image-size", type=click.IntRange(min=MIN_IMAGE_SIZE[ModelSize.SMALL]), default=96,
              show_default=True, help="Training image side, px.")
@click.option("--batch-size", type=_POSITIVE, default=64, show_default=True)
@click.option("--epochs", type=_POSITIVE, default=2, show_default=True,
              help="Epochs per run, both methods.")
@click.option("--repeats", type=_POSITIVE, default=2, show_default=True,
              help="Alternating runs per method.")
@click.option("--batch-sizes", callback=batch_size_list,
              help="Comma-separated batch sizes for a tfopt throughput sweep, e.g. 32,64,128.")
@click.option("--steps-per-execution", type=click.IntRange(min=1),
              help="tfopt's steps_per_execution [default: tuned by a short trial of 1, 4, 16].")
@click.option("--max-steps", type=click.IntRange(min=1),
              help="Cap on steps per epoch; below one pass in all, tfopt's pipeline runs "
                   "without its cache.")
@click.option("--fuse-batch-norm/--keras-batch-norm", default=True, show_default=True,
              help="tfopt's model runs batch normalisation with TensorFlow's fused kernel "
                   "(tfopt.fuse_batch_norm), or as Keras 3 does.")
@click.option("--plot", type=click.Path(dir_okay=False), callback=plot_path,
              help="Chart the sweep's examples/s against batch size: FILE.svg, or FILE.png with "
                   "matplotlib (tfopt[plot]); without --batch-sizes the sweep is 32,64,128.")
@click.option("-q", "--quiet", is_flag=True, help="No progress lines on stderr.")
@json_option()
def train(shards, model, image_size, batch_size, epochs, repeats, batch_sizes,
          steps_per_execution, max_steps, fuse_batch_norm, plot, quiet, as_json):
    """End-to-end fit: default Keras beside tfopt (policy, pipeline, steps_per_execution, fused BN).

    SHARDS is a dataset from 'tfopt convert' with a validation split; without it a small demo
    dataset (600 images) is made in a temporary folder first.
    """
    needs_tensorflow()
    import tempfile

    from tfopt.bench.demo import make_demo_shards
    from tfopt.bench.plot import write_sweep_plot
    from tfopt.bench.train import TrainBenchSettings, run_train_bench

    progress = None if quiet else (lambda line: click.echo(line, err=True))
    if plot and not batch_sizes:
        batch_sizes = (32, 64, 128)
    with tempfile.TemporaryDirectory(prefix="tfopt-bench-train-") as workspace:
        if shards is None:
            if progress:
                progress("making demo data (600 images) ...")
            shards = make_demo_shards(workspace)
        settings = TrainBenchSettings(
            source=shards, model=model, image_size=image_size, batch_size=batch_size,
            epochs=epochs, repeats=repeats, batch_sizes=batch_sizes or (),
            steps_per_execution=steps_per_execution, max_steps=max_steps,
            fuse_batch_norm=fuse_batch_norm)
        report = run_train_bench(settings, progress=progress)
    if plot:
        write_sweep_plot(plot, report.sweep, f"tfopt {model} {image_size}px: examples/s by "
                                            "batch size")
        if progress:
            progress(f"plot written to {plot}")
    if as_json:
        echo_json(report.to_json())
    else:
        click.echo(report.describe())


COMMANDS = [bench]
