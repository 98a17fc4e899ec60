"""``tfopt bench pipeline``: tfopt's input pipeline beside the usual ways, in one process.

Methods (:data:`METHODS`), alternating on the same shards and settings: ``naive`` and
``guide`` (:mod:`tfopt.bench.baselines`), ``keras-folder`` (``image_dataset_from_directory``
on the image folder the shards came from), ``tfopt`` (``PipelineBuilder``), ``tfopt-device``
(its random crop on the accelerator, training only) and ``limit`` (in-memory decodes on all
cores); optionally tfopt through a local tf.data service of 1, 2, ... workers. The report gives
examples/s per epoch (median, spread), the CPU use and peak memory of each method, the ratios,
and tfopt's stage breakdown (:func:`tfopt.analyze` on tfopt's pipeline). What each method does
and why: ``docs/bench.md``.

Example:
    >>> report = run_pipeline_bench(BenchSettings("shards/", epochs=2))
    >>> print(report.describe())
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import statistics
import time
from pathlib import Path

import tensorflow as tf

import tfopt.rules as rules
from tfopt._system import peak_rss, reset_peak_rss, usable_cores
from tfopt._validate import flag, is_int, optional_whole_number, require, whole_number
from tfopt.analysis.report import PipelineReport
from tfopt.bench.baselines import guide_dataset, keras_folder_dataset, limit_dataset, naive_dataset
from tfopt.bench.service_workers import MAX_SERVICE_WORKERS, local_services
from tfopt.data.pipeline import PipelineBuilder
from tfopt.data.sizes import fill_batches
from tfopt.errors import InvalidArgumentError, UnsupportedDatasetError
from tfopt.records.format.tfrecord import count_records
from tfopt.records.manifest import MANIFEST_NAME, read_manifest

METHODS = ("naive", "guide", "keras-folder", "tfopt", "tfopt-device", "limit")
KERAS_FOLDER = "keras-folder"  # needs the image folder: left out of the defaults without one
SERVICE_NOTE = ("the workers are processes on this host and share its cores with the "
                "benchmark: the ratios show the service's overhead and scaling here, not a "
                "multi-host speed-up")
# The breakdown's stages, where tfopt's pipeline has them ("crop" only where a cache of whole
# decoded images splits the decode from the crop), and the name= of the op each starts at; a
# stage runs to the op before the next one starts (the read's shuffle and repeat are the read's)
STAGES = ("read", "parse", "decode", "crop", "batch", "prefetch")
_STARTS = {"read": "read", "parse_block": "parse", "decode": "decode", "crop": "crop",
           "batch": "batch", "prefetch": "prefetch"}
# The breakdown's analysis budget: about the four epochs the breakdown timed before it was an
# analysis (one per prefix it cut), within these bounds in seconds
ANALYSIS_EPOCHS = 4
ANALYSIS_SECONDS = (3.0, 60.0)


@dataclasses.dataclass(frozen=True)
class BenchSettings:
    """What every method is asked to produce.

    Attributes:
        source: A dataset folder, shard list or glob.
        batch_size: Examples per batch. Defaults to 64.
        image_size: Output side in pixels. Defaults to 224.
        training: Random-resized crops and shuffling (True) or central crops (False).
            Defaults to True.
        epochs: Passes over the data per run; later passes show what caching does.
            Defaults to 1.
        repeats: Runs per method. Defaults to 3.
        cache: tfopt's cache setting ("auto", True, False). Under "auto", runs that read one
            pass or less in all (``epochs=1``, or cut by ``max_batches``) go without a cache,
            which would serve none of it, and the report says so. Defaults to "auto".
        max_batches: Cap on full batches per epoch (quick runs; an epoch is otherwise every
            record of the split, see :func:`epoch_ends`). Defaults to None (whole epoch).
        split: The manifest split. Defaults to the builder's choice.
        tfopt_source: Where tfopt reads instead of ``source``: the same images stored at
            training resolution (``tfopt convert --max-size``), to compare with the other
            methods on the originals. Defaults to None (the same source).
        service_workers: Worker counts to run tfopt's pipeline through a local tf.data
            service with, e.g. ``(0, 1, 2)``; 0 is the in-process ``tfopt`` method, measured
            whenever anything is. Sorted, without repeats. Defaults to () (no service).
        images: The image folder (one sub-folder per class) for the ``keras-folder`` method.
            Defaults to None: the folder the manifest says the shards were converted from,
            where it still exists.
        stages: Run the stage breakdown (:func:`stage_breakdown`, 3-60 s) after the timed
            runs; False leaves it out (the report's stages are then empty and its analysis
            None), for scripts that time many settings. Defaults to True.
    """

    source: object
    batch_size: int = 64
    image_size: int = 224
    training: bool = True
    epochs: int = 1
    repeats: int = 3
    cache: object = "auto"
    max_batches: int | None = None
    split: str | None = None
    tfopt_source: object = None
    service_workers: tuple[int, ...] = ()
    images: object = None
    stages: bool = True

    def __post_init__(self):
        for name in ("batch_size", "image_size", "epochs", "repeats"):
            object.__setattr__(self, name, whole_number(getattr(self, name), name, 1))
        object.__setattr__(self, "training", flag(self.training, "training"))
        object.__setattr__(self, "stages", flag(self.stages, "stages"))
        object.__setattr__(self, "max_batches", optional_whole_number(
            self.max_batches, "max_batches", 1, "None (whole epochs) or an int >= 1"))
        counts = tuple(self.service_workers or ())
        require(all(is_int(count) and 0 <= count <= MAX_SERVICE_WORKERS for count in counts),
                "service_workers", self.service_workers,
                f"worker counts from 0 to {MAX_SERVICE_WORKERS}, such as (0, 1, 2)")
        object.__setattr__(self, "service_workers", tuple(sorted({int(c) for c in counts})))


@dataclasses.dataclass(frozen=True)
class MethodResult:
    """Examples per second of one method: per epoch, over the repeats."""

    method: str
    epoch_rates: list[list[float]]  # [epoch][repeat]
    cpu_utilisation: float  # process CPU seconds / (wall seconds x cores), over all its runs
    peak_rss: int | None = None  # bytes: the process's peak resident memory in its first run

    def median(self, epoch: int = 0) -> float:
        return statistics.median(self.epoch_rates[epoch])

    def spread(self, epoch: int = 0) -> tuple[float, float]:
        return min(self.epoch_rates[epoch]), max(self.epoch_rates[epoch])


@dataclasses.dataclass(frozen=True)
class BenchReport:
    settings: BenchSettings
    results: dict[str, MethodResult]
    stages: dict[str, float]  # stage -> examples/s of tfopt's pipeline up to it (STAGES)
    slowest_stage: str  # the stage holding the analysis's bottleneck ("": no analysis)
    choices: str
    examples_per_epoch: int
    service: dict[int, MethodResult] = dataclasses.field(default_factory=dict)  # workers -> runs
    notes: tuple[str, ...] = ()  # what the runs did otherwise than asked, and why
    ram_budget: int | None = None  # bytes tfopt's plan gives its cache and tf.data's buffers
    analysis: PipelineReport | None = None  # tfopt.analyze on tfopt's pipeline, cache off

    def ratio(self, method: str, other: str, epoch: int = 0) -> float:
        return self.results[method].median(epoch) / self.results[other].median(epoch)

    def service_rows(self) -> dict[int, MethodResult]:
        """Worker count -> runs, 0 (the in-process ``tfopt`` method) first; {} without service."""
        return {0: self.results["tfopt"], **self.service} if self.service else {}

    def service_ratio(self, workers: int, epoch: int = 0) -> float:
        """Median examples/s through ``workers`` service workers over that of 0 (in-process)."""
        return self.service_rows()[workers].median(epoch) / self.results["tfopt"].median(epoch)

    def to_json(self) -> dict:
        settings = dataclasses.asdict(self.settings)
        settings["source"] = str(settings["source"])
        settings["tfopt_source"] = settings["tfopt_source"] and str(settings["tfopt_source"])
        settings["images"] = settings["images"] and str(settings["images"])
        epochs = range(self.settings.epochs)
        return {
            "settings": settings,
            "examples_per_epoch": self.examples_per_epoch,
            "methods": {
                name: {"median": [result.median(e) for e in epochs],
                       "spread": [result.spread(e) for e in epochs],
                       "runs": result.epoch_rates,
                       "cpu_utilisation": result.cpu_utilisation,
                       "peak_rss_bytes": result.peak_rss}
                for name, result in self.results.items()
            },
            "ram_budget_bytes": self.ram_budget,
            "ratios": {f"{mine}/{other}": [self.ratio(mine, other, e) for e in epochs]
                       for mine in self.results if mine.startswith("tfopt")
                       for other in self.results if not other.startswith("tfopt")},
            "service": {
                "note": SERVICE_NOTE,
                "rows": [{"workers": workers,
                          "median": [result.median(e) for e in epochs],
                          "spread": [result.spread(e) for e in epochs],
                          "runs": result.epoch_rates,
                          "ratio_to_0_workers": [self.service_ratio(workers, e) for e in epochs],
                          "cpu_utilisation": result.cpu_utilisation}
                         for workers, result in self.service_rows().items()],
            } if self.service else None,
            "stages": self.stages,
            "slowest_stage": self.slowest_stage,
            "stage_ceiling_per_s": self._ceiling(),  # examples/s
            "stage_analysis": json.loads(self.analysis.to_json()) if self.analysis else None,
            "choices": self.choices,
            "notes": list(self.notes),
        }

    def describe(self) -> str:
        settings = self.settings
        mode = "training (random-resized crop)" if settings.training else "evaluation (central crop)"
        source = (f"{settings.source} (tfopt reads {settings.tfopt_source})"
                  if settings.tfopt_source else str(settings.source))
        lines = [f"pipeline benchmark: {source}, {mode}, batch {settings.batch_size}, "
                 f"{settings.image_size}x{settings.image_size}, {self.examples_per_epoch} examples "
                 f"per epoch, median of {settings.repeats} alternating runs, "
                 f"{usable_cores()} cores"]
        header = "method       " + "".join(f"  epoch {e + 1:<2} ex/s (spread)       "
                                          for e in range(settings.epochs)) + "  CPU   peak RSS"
        lines.append(header)
        for name, result in self.results.items():
            cells = "".join(f"  {result.median(e):9.1f} ({result.spread(e)[0]:7.1f}-"
                            f"{result.spread(e)[1]:7.1f})"
                            for e in range(settings.epochs))
            lines.append(f"{name:12s} {cells}  {result.cpu_utilisation:4.0%}  "
                         f"{_mib(result.peak_rss):>9s}")
        budget = f"; tfopt's RAM budget (its cache and tf.data's buffers) {_mib(self.ram_budget)}"
        lines.append("peak RSS: this whole process (TensorFlow's runtime included) in the "
                     "method's first run, at least what the runs before it left resident"
                     + (budget if self.ram_budget else ""))
        for mine in (name for name in self.results if name.startswith("tfopt")):
            for other in (name for name in self.results if not name.startswith("tfopt")):
                ratios = ", ".join(f"{self.ratio(mine, other, e):.2f}x"
                                   for e in range(settings.epochs))
                lines.append(f"{mine}/{other}: {ratios} (per epoch)")
        lines.extend(self._describe_service())
        if self.analysis is not None:
            stages = ", ".join(f"{stage} {rate:,.0f}" for stage, rate in self.stages.items())
            lines.append(f"tfopt stages (examples/s up to each): {stages}; "
                         f"slowest: {self.slowest_stage}")
            analysis, ceiling = self.analysis, self._ceiling()
            lines.append(
                f"tfopt.analyze on tfopt's pipeline (cache off, {analysis.seconds:.0f} s): "
                f"bottleneck {analysis.bottleneck or 'none found'}, ceiling "
                + (f"{ceiling:,.0f}" if ceiling else "-") + " examples/s with ideal "
                f"parallelism on {analysis.cores} core(s), "
                f"{analysis.rate_per_s * settings.batch_size:,.0f} measured")
        lines.extend(f"note: {note}" for note in self.notes)
        lines.append("tfopt's choices:")
        lines.extend("  " + line for line in self.choices.splitlines())
        return "\n".join(lines)

    def _ceiling(self) -> float | None:
        """The analysis's ceiling in examples/s (its output elements are batches)."""
        if self.analysis is None or self.analysis.ceiling_per_s is None:
            return None
        return self.analysis.ceiling_per_s * self.settings.batch_size

    def _describe_service(self) -> list[str]:
        if not self.service:
            return []
        epochs = range(self.settings.epochs)
        lines = ["tfopt through a local tf.data service (CPU: the benchmark and that "
                 "service's processes together):",
                 f"  note: {SERVICE_NOTE}",
                 "workers      " + "".join(f"  epoch {e + 1:<2} ex/s (spread)       "
                                         for e in epochs) + "  vs 0 workers  CPU"]
        for workers, result in self.service_rows().items():
            cells = "".join(f"  {result.median(e):9.1f} ({result.spread(e)[0]:7.1f}-"
                            f"{result.spread(e)[1]:7.1f})" for e in epochs)
            ratios = ", ".join(f"{self.service_ratio(workers, e):.2f}x" for e in epochs)
            name = "0 in-process" if workers == 0 else str(workers)
            lines.append(f"{name:12s} {cells}  {ratios:12s}  {result.cpu_utilisation:4.0%}")
        return lines


# -- measuring ------------------------------------------------------------------------------


def epoch_ends(batch_sizes, examples: int, epochs: int) -> list[int]:
    """The index of the batch that completes each of ``epochs`` epochs of ``examples``.

    Epoch k ends at the first batch whose running total of examples reaches k x ``examples``,
    counting what each batch holds: a method that batches before it repeats ends a pass with a
    short batch, and one that repeats first (tfopt) sends the next pass's first examples in the
    same batch. Counting every batch as full would credit the first kind with examples it never
    produced; timing only the full batches that fit in a pass would leave out of tfopt's first
    epoch the decodes its shuffle buffer needs from the end of the pass.

    Raises:
        tfopt.errors.InvalidArgumentError: The batches ran out first.

    Example:
        >>> epoch_ends([4, 4, 2, 4, 4, 2], examples=10, epochs=2)
        [2, 5]
        >>> epoch_ends([4, 4, 4, 4, 4], examples=10, epochs=2)
        [2, 4]
    """
    ends = list(itertools.islice(_epoch_ends(iter(batch_sizes), examples), epochs))
    if len(ends) < epochs:
        raise InvalidArgumentError(f"the batches ran out after {len(ends)} epoch(s) of "
                                   f"{examples:,} examples; {epochs} were asked for")
    return ends


def _epoch_ends(batch_sizes, examples: int):
    """Lazily, what :func:`epoch_ends` returns: each end as soon as its batch is read."""
    total = 0
    for index, size in enumerate(batch_sizes):
        total += size
        ended = total // examples
        for _ in range(ended - (total - size) // examples):
            yield index


def _time_epochs(dataset: tf.data.Dataset, examples: int, epochs: int,
                 fill: int = 0) -> list[float]:
    """Examples/s of each of ``epochs`` epochs of ``examples`` (:func:`epoch_ends`), through
    one iterator; then on, untimed, to ``fill`` batches in all (to one element past the pass
    that fills a cache)."""
    iterator = iter(dataset)
    taken = 0

    def sizes():  # the leading dimension of each batch's first component: what it holds
        nonlocal taken
        for element in iterator:
            taken += 1
            yield int(tf.nest.flatten(element)[0].shape[0])

    rates, started = [], time.perf_counter()
    for _ in itertools.islice(_epoch_ends(sizes(), examples), epochs):
        now = time.perf_counter()
        rates.append(examples / (now - started))
        started = now
    if len(rates) < epochs:
        raise InvalidArgumentError(f"the pipeline ended after {len(rates)} epoch(s) of "
                                   f"{examples:,} examples; {epochs} were asked for")
    for _ in range(fill - taken):
        next(iterator)
    return rates


def run_pipeline_bench(settings: BenchSettings, methods=None, progress=None) -> BenchReport:
    """Measure each method; see the module docstring.

    Args:
        settings: What to measure.
        methods: Which methods, in alternation order, ``tfopt`` included. Defaults to all of
            :data:`METHODS`, less ``keras-folder`` when there is no image folder (said in
            the report's notes); ``tfopt-device`` is left out when not training.
        progress: Called with a line after each run (the CLI prints it on stderr).

    Raises:
        tfopt.errors.InvalidArgumentError: An unknown method, ``keras-folder`` asked for without an
            image folder, or a source without images.
        tfopt.TfoptError: A local tf.data service server (``settings.service_workers``) did
            not start.
    """
    notes = []
    images = _image_folder(settings)
    if methods is None:
        methods = [method for method in METHODS if method != KERAS_FOLDER or images]
        if not images:
            notes.append(f"{KERAS_FOLDER} left out: no image folder (the shards' manifest names "
                         "none that exists here; pass images=, or --images)")
    methods = list(methods)
    unknown = set(methods) - set(METHODS)
    if unknown or "tfopt" not in methods:
        raise InvalidArgumentError(f"methods={methods}: choose from {', '.join(METHODS)}, "
                                   "tfopt included")
    if KERAS_FOLDER in methods and not images:
        raise InvalidArgumentError(
            f"methods={methods}: {KERAS_FOLDER} reads the image folder the shards came from, "
            f"and {settings.source} names none that exists here: pass images= (--images)")

    if not settings.training:
        methods = [method for method in methods if method != "tfopt-device"]

    first = PipelineBuilder(settings.source, batch_size=settings.batch_size,
                            training=settings.training, image_size=settings.image_size,
                            cache=settings.cache, split=settings.split, repeat=True)
    if first.source.image_key is None:
        raise InvalidArgumentError(f"{settings.source}: the pipeline benchmark needs images")
    records = first.source.num_records or _count(first)
    # an epoch is one pass (its last batch short or shared with the next pass: epoch_ends),
    # or as many examples as max_batches full batches hold, where that is less
    examples = records
    if records < settings.batch_size:  # not one batch an epoch: a rate would mean nothing
        raise InvalidArgumentError(
            f"batch_size={settings.batch_size} is larger than the {records:,} examples of one "
            f"epoch of {settings.source}: pass a batch size of at most {records:,}")
    if settings.max_batches:
        examples = min(examples, settings.max_batches * settings.batch_size)
    cache, fill, cache_notes = _cache_for_runs(settings, records, examples)
    notes.extend(cache_notes)

    def builder(**extra):
        return PipelineBuilder(settings.tfopt_source or settings.source,
                               batch_size=settings.batch_size,
                               training=settings.training, image_size=settings.image_size,
                               cache=cache, split=settings.split, repeat=True, **extra)

    crop = "random" if settings.training else "central"
    factories = {
        "naive": lambda: naive_dataset(first.source, settings.image_size, settings.batch_size,
                                       crop=crop, repeat=True),
        "guide": lambda: guide_dataset(first.source, settings.image_size, settings.batch_size,
                                       crop=crop),
        "tfopt": lambda: builder().build(),
        "tfopt-device": lambda: builder(random_crop="device").build(),
        "limit": lambda: limit_dataset(first.source, settings.batch_size),
        KERAS_FOLDER: lambda: keras_folder_dataset(images, settings.image_size,
                                                   settings.batch_size, shuffle=settings.training),
    }
    services = [count for count in settings.service_workers if count > 0]
    runs = [*methods, *(f"service-{count}" for count in services)]  # alternation order
    rates = {run: [[] for _ in range(settings.epochs)] for run in runs}
    cpu = {run: [0.0, 0.0] for run in runs}  # cpu seconds, wall seconds
    peaks = {run: None for run in runs}  # bytes, None where the peak cannot be reset per run
    with _local_services(services, progress) as local:
        for count in services:
            factories[f"service-{count}"] = (
                lambda count=count: builder(service=local.address(count)).build())
        for repeat in range(settings.repeats):
            for run in runs:
                # the first round only: memory an earlier run freed stays resident (the
                # process keeps it for reuse; a garbage collection and malloc_trim do not hand
                # back a cache's gigabyte here), so a later round's peak would carry the
                # largest earlier one
                measured_peak = repeat == 0 and reset_peak_rss()
                dataset = factories[run]()
                count = int(run.removeprefix("service-")) if run.startswith("service-") else 0
                before_cpu, before_wall = _cpu_seconds(local, count), time.perf_counter()
                # tfopt's runs read on to the end of the pass that fills their cache, untimed
                then = fill if run.startswith(("tfopt", "service-")) else 0
                epoch_rates = _time_epochs(dataset, examples, settings.epochs, then)
                cpu[run][0] += _cpu_seconds(local, count) - before_cpu
                cpu[run][1] += time.perf_counter() - before_wall
                if measured_peak:
                    peaks[run] = peak_rss()
                for epoch, rate in enumerate(epoch_rates):
                    rates[run][epoch].append(rate)
                del dataset
                if local is not None:
                    local.check_signals()
                if progress:
                    progress(f"run {repeat + 1}/{settings.repeats} {run:6s} "
                             + " ".join(f"{rate:8.1f}" for rate in epoch_rates) + " examples/s")
    cores = usable_cores()
    results = {run: MethodResult(run, rates[run], cpu[run][0] / (cpu[run][1] * cores),
                                 peaks[run])
               for run in runs}
    service = {count: results.pop(f"service-{count}") for count in services}
    stages, analysis = {}, None
    if settings.stages:
        tfopt_rate = results["tfopt"].median(0)
        seconds = _analysis_seconds(examples / tfopt_rate if tfopt_rate else None)
        if progress:
            progress(f"stages: tfopt.analyze on tfopt's pipeline, about {seconds:.0f} s")
        try:
            stages, analysis = stage_breakdown(settings, seconds)
        except UnsupportedDatasetError as error:  # a TensorFlow whose private APIs moved, say
            notes.append(f"no stage breakdown: {error}")
    planned = builder()
    choices = planned.choices.describe()
    if "tfopt-device" in methods:
        device = builder(random_crop="device").choices.describe()
        choices += "\nwith random_crop='device':\n" + device
    slowest = slowest_stage(analysis) if analysis else ""
    return BenchReport(settings, results, stages, slowest, choices, examples,
                       service, tuple(notes), planned.plan.ram_budget, analysis)


def _cache_for_runs(settings: BenchSettings, records: int,
                    examples: int) -> tuple[object, int, tuple[str, ...]]:
    """tfopt's cache setting for the timed runs of ``examples`` per epoch, the batches each
    run takes in all (timed and untimed), and the report's notes on them.

    A cache serves only the passes after the one that fills it, so with ``cache="auto"`` runs
    that read one pass or less in all go without it, by the rule ``tfopt.Run``'s fits and the
    planner take (:func:`tfopt.rules.keeps_cache`): ``--epochs 1`` measures what a one-epoch
    job gets.
    tf.data completes a cache only at the end of its input and discards one left part-filled
    when the iterator goes (with a C++ warning, "did not fully read the dataset being cached";
    docs/data.md): a cache asked for (``cache=True``) in runs cut by ``max_batches`` to less
    than one pass stays, and the report says every epoch measured fills it. Any other run with
    a cache reads on, untimed where the epochs end sooner, to one record past the first pass,
    so that its cache is complete when it ends.
    """
    epochs = settings.epochs
    read = examples * epochs
    if settings.cache is False:
        return False, 0, ()
    cut = (f"--max-batches {settings.max_batches} x {epochs} epoch(s) read {read:,} of the "
           f"{records:,} examples of one pass, and a cache is filled only by a pass read to its "
           "end")
    if not rules.keeps_cache(settings.cache, read, records):
        if read < records:
            return False, 0, (f"tfopt's cache is off in these runs: {cut}, so it would serve "
                              "nothing and be discarded after each run; runs of whole epochs "
                              "(no --max-batches) measure it",)
        return False, 0, (f"tfopt's cache is off in these runs: {epochs} epoch(s) read one pass "
                          f"of the {records:,} examples, and a cache serves only the passes "
                          "after the one that fills it (tfopt.Run leaves it out of such a fit "
                          "too); --epochs 2 or more measures it, --cache on the pass that "
                          "fills it",)
    if read < records:
        return settings.cache, 0, (f"every epoch measured fills tfopt's cache: {cut}; each run's "
                                   "part-filled cache is discarded when it ends (TensorFlow "
                                   "logs that it 'did not fully read the dataset being cached')",)
    return settings.cache, fill_batches(records, settings.batch_size), ()


def stage_breakdown(settings: BenchSettings,
                    seconds: float) -> tuple[dict[str, float], PipelineReport]:
    """:func:`tfopt.analyze` on tfopt's whole pipeline (cache off, prefetch in host memory) for
    about ``seconds``, and from its stages the examples/s up to each of :data:`STAGES`
    (:func:`breakdown_rates`).

    Raises:
        tfopt.errors.UnsupportedDatasetError: The analysis could not read or rebuild the pipeline.
    """
    from tfopt.analysis.analyze import run

    builder = PipelineBuilder(settings.tfopt_source or settings.source,
                              batch_size=settings.batch_size, training=settings.training,
                              image_size=settings.image_size, cache=False,
                              split=settings.split, repeat=True, prefetch_to_device=False)
    report = run(builder.build(), seconds=seconds, ram_budget=builder.plan.ram_budget)
    return breakdown_rates(report, settings.batch_size), report


def breakdown_rates(report: PipelineReport, batch_size: int) -> dict[str, float]:
    """Stage -> examples/s up to it, for the stages of :data:`STAGES` in ``report``.

    A stage here is the ops from the one it starts at to the next stage's (the read's shuffle
    and repeat, the parse's batching of records into blocks and unbatching), and its rate that
    of the pipeline cut after the last of them: a prefix rate times the examples in one of its
    elements (``batch_size`` examples make an output element, of which the op makes
    ``elements_per_output``).
    """
    rates = {}
    for stage, job in zip(report.stages, _jobs(report), strict=True):
        if job in STAGES and stage.prefix_rate and stage.elements_per_output:
            rates[job] = stage.prefix_rate * batch_size / stage.elements_per_output
    return rates


def _jobs(report: PipelineReport) -> list[str]:
    """Each analysed stage's breakdown stage (:data:`STAGES`), else its own label (the file
    list before the read)."""
    jobs, job = [], None
    for stage in report.stages:
        job = _STARTS.get(stage.name, job)
        jobs.append(job or stage.label)
    return jobs


def slowest_stage(report: PipelineReport) -> str:
    """The breakdown stage that holds the analysis's bottleneck ("" where it found none)."""
    labels = [stage.label for stage in report.stages]
    if report.bottleneck not in labels:
        return ""
    return _jobs(report)[labels.index(report.bottleneck)]


def _analysis_seconds(epoch_seconds: float | None) -> float:
    """The breakdown's budget: :data:`ANALYSIS_EPOCHS` of tfopt's measured epochs, within
    :data:`ANALYSIS_SECONDS`."""
    low, high = ANALYSIS_SECONDS
    if epoch_seconds is None:
        return high
    return min(high, max(low, ANALYSIS_EPOCHS * epoch_seconds))


def _image_folder(settings: BenchSettings) -> Path | None:
    """The ``keras-folder`` method's images: as given, else the manifest's source folder."""
    if settings.images is not None:
        return Path(settings.images)
    source = settings.source
    if not isinstance(source, (str, os.PathLike)) or not (Path(source) / MANIFEST_NAME).is_file():
        return None
    origin = read_manifest(source).source
    path = origin.get("path")
    if origin.get("kind") == "images" and path and Path(path).is_dir():
        return Path(path)
    return None


def _mib(size: int | None) -> str:
    return "-" if size is None else f"{size / 2**20:,.0f} MiB"


def _count(builder: PipelineBuilder) -> int:
    return sum(count_records(file, builder.source.compression) for file in builder.source.files)


def _local_services(counts, progress):
    """Local tf.data service servers for ``counts`` (None when there are none to start)."""
    if not counts:
        return contextlib.nullcontext()
    return local_services(counts, progress=progress)


def _cpu_seconds(local=None, service_workers: int = 0) -> float:
    """CPU seconds of this process, plus those of the ``service_workers``-worker service's."""
    times = os.times()
    servers = local.cpu_seconds(service_workers) if service_workers else 0.0
    return times.user + times.system + (servers or 0.0)
