"""Benchmark commands: ``tfopt bench pipeline``."""

from __future__ import annotations

import click

from tfopt.cli._common import echo_json, needs_tensorflow


@click.group("bench")
def bench():
    """Throughput benchmarks: tfopt beside the plain TensorFlow way, in one run."""


@bench.command("pipeline")
@click.argument("path")
@click.option("--batch-size", default=64, show_default=True)
@click.option("--image-size", default=224, show_default=True, help="Output side, px.")
@click.option("--training/--eval", default=True, show_default=True,
              help="Random-resized crops and shuffling, or central crops.")
@click.option("--epochs", default=1, show_default=True,
              help="Passes per run; later passes show what caching does.")
@click.option("--repeats", default=3, show_default=True, help="Alternating runs per method.")
@click.option("--cache", type=click.Choice(["auto", "on", "off"]), default="auto",
              show_default=True, help="tfopt's cache setting.")
@click.option("--max-batches", type=int, help="Cap on batches per epoch (quick runs).")
@click.option("--split", help="Manifest split [default: train when training].")
@click.option("--tfopt-source", help="tfopt reads this copy instead (e.g. stored with "
              "convert --max-size): compares it with the others on PATH.")
@click.option("--methods", default="naive,guide,tfopt,tfopt-device,limit", show_default=True,
              help="Comma-separated methods, in alternation order.")
@click.option("-q", "--quiet", is_flag=True, help="No per-run lines on stderr.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")
def pipeline(path, batch_size, image_size, training, epochs, repeats, cache, max_batches, split,
             tfopt_source, methods, quiet, as_json):
    """Examples/s of naive, guide, tfopt and the decode limit on the same shards."""
    needs_tensorflow()
    from tfopt.bench.pipeline import BenchSettings, run_pipeline_bench

    settings = BenchSettings(
        source=path, batch_size=batch_size, image_size=image_size, training=training,
        epochs=epochs, repeats=repeats, cache={"auto": "auto", "on": True, "off": False}[cache],
        max_batches=max_batches, split=split, tfopt_source=tfopt_source)
    progress = None if quiet else (lambda line: click.echo(line, err=True))
    report = run_pipeline_bench(settings, [m.strip() for m in methods.split(",") if m.strip()],
                                progress=progress)
    if as_json:
        echo_json(report.to_json())
    else:
        click.echo(report.describe())


COMMANDS = [bench]
