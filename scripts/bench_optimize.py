"""tfopt.optimize on pipelines written the way users write them, side by side with the original
and with the tf.data guide's hand-tuned recipe for the same work.

    python scripts/bench_optimize.py [--work bench-optimize] [--rounds 3] [--seconds 8]

The data is made once in --work (kept for later runs): demo images (tfopt demo-data), camera-
sized photos (demo-data --kind photos), TFRecord shards written by plain TensorFlow under Model
Garden's keys without a tfopt manifest, tfopt's own shards of the demo images, and a text corpus.
Each case is one flawed pipeline, the bottleneck the analysis should name, and the guide's fix.
Every round builds each pipeline anew (a cache must not survive into the next round): the
original twice (the second, "again", is the run's noise floor), the guide's recipe and
optimize's. It times whole epochs of each, every one from a new iterator drained in-graph to its
end, the pipelines taking turns (a share of the time each) in an order that rotates with the
round; the table has each pipeline's examples over seconds, summed over every timed epoch.
Where a pipeline caches, epoch 1 (it fills the cache) is reported apart, timed the way a
training script meets it: each in a new Python process (--first-epochs per pipeline, in
alternating turns) that first calls optimize on the original, as a user would, whichever
pipeline it then times, so that every timed first epoch follows the same history. A first epoch
during which the VM's neighbours took over 5 % of its CPU time (the steal in /proc/stat) is
timed again in a new process, up to 3 tries; the epoch-1 ratios carry a 90 % bootstrap interval
over the processes.
``optimize`` is called once per round on a fresh copy; its time is in the table.
"""

from __future__ import annotations

import argparse
import functools
import glob
import json
import os
import random
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from tfopt._tf import import_tensorflow  # noqa: E402

tf = import_tensorflow()
import keras  # noqa: E402
import numpy as np  # noqa: E402

import tfopt  # noqa: E402
from tfopt.analysis import measure  # noqa: E402
from tfopt.bench.demo import write_foreign_shards  # noqa: E402

AUTOTUNE = tf.data.AUTOTUNE
SIZE = 224
BATCH = 64
SLICES = 4  # turns the pipelines take in each round's timing (see epoch_times)
# a first epoch in a new process is timed again where the VM's neighbours took more than this
# share of its CPU time (first_epochs_in_new_processes), at most STEAL_TRIES times in all
MAX_STEAL = 0.05
STEAL_TRIES = 3


@dataclass
class Case:
    name: str
    data: str  # what it reads, for the table
    expected: str  # the stage the analysis should name as the bottleneck
    original: object  # () -> the pipeline as a user wrote it
    tuned: object | None  # () -> the guide's recipe for the same work (None: no safe rewrite)
    examples: int = 0  # examples in an epoch
    cached: bool = False  # the guide caches: report epoch 1 and the later epochs apart


# ---- data -------------------------------------------------------------------------------------

def make_data(work: Path) -> dict[str, object]:
    work.mkdir(parents=True, exist_ok=True)
    images, photos = work / "images", work / "photos"
    if not images.exists():
        tfopt.make_demo_data(images, count=1500, classes=10)
    if not photos.exists():
        tfopt.make_demo_data(photos, count=120, classes=6, kind="photos")
    garden = work / "garden"
    if not garden.exists():
        write_foreign_shards(images, garden, side=320, shards=8)  # seed 0: the same bytes
    shards = work / "shards"
    if not shards.exists():
        tfopt.convert(str(images), str(shards), val_fraction=0.0)
    return {"images": images, "photos": photos,
            "garden": sorted(glob.glob(str(garden / "train-*"))),
            "shards": sorted(glob.glob(str(shards / "train-*.tfrecord"))),
            "text": text_corpus(), "image_count": len(list(images.glob("*/*.jpg"))),
            "photo_count": len(list(photos.glob("*/*.jpg")))}


def text_corpus(lines: int = 20000):
    rng = random.Random(0)
    words = [f"w{i}" for i in range(3000)]
    text = [" ".join(rng.choices(words, k=rng.randint(12, 60))) for _ in range(lines)]
    return text, [rng.randint(0, 1) for _ in range(lines)], words


# ---- the pipelines ------------------------------------------------------------------------------

def parse_decode(keys):
    image_key, label_key = keys

    def parse(record):
        example = tf.io.parse_single_example(record, {
            image_key: tf.io.FixedLenFeature([], tf.string),
            label_key: tf.io.FixedLenFeature([], tf.int64)})
        image = tf.io.decode_jpeg(example[image_key], channels=3)
        return tf.image.resize(image, (SIZE, SIZE)) / 255.0, example[label_key]

    return parse


def load_image(path):
    image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
    return tf.image.resize(image, (SIZE, SIZE)) / 255.0


def flip(images):
    return tf.image.random_flip_left_right(images)


def cases(data) -> list[Case]:
    garden, shards = data["garden"], data["shards"]
    garden_parse = parse_decode(("image/encoded", "image/class/label"))
    manifest = tfopt.read_manifest(Path(shards[0]).parent)  # tfopt's shards name their keys
    own_parse = parse_decode((manifest.image_key, manifest.label_key))
    text, labels, words = data["text"]
    vectorize = keras.layers.TextVectorization(max_tokens=len(words) + 2,
                                               output_sequence_length=64, vocabulary=words)

    def texts():
        return tf.data.Dataset.from_tensor_slices((text, labels))

    def folder(root):
        return tf.data.Dataset.list_files(str(Path(root) / "*" / "*.jpg"), shuffle=False)

    def per_file(parallel):
        files = tf.data.Dataset.from_tensor_slices(garden)
        return files.interleave(
            lambda f: tf.data.TFRecordDataset(f).map(garden_parse), cycle_length=4,
            num_parallel_calls=AUTOTUNE if parallel else None, name="read_parse")

    def user_way(files, parse):  # how many users write it: no parallelism, no prefetch
        return (tf.data.TFRecordDataset(files).shuffle(1000)
                .map(parse, name="parse_decode").batch(BATCH))

    def guide_way(files, parse):  # the tf.data guide: parallel reads and maps, prefetch
        return (tf.data.Dataset.from_tensor_slices(files)
                .interleave(tf.data.TFRecordDataset, num_parallel_calls=AUTOTUNE)
                .shuffle(1000).map(parse, num_parallel_calls=AUTOTUNE, name="parse_decode")
                .batch(BATCH).prefetch(AUTOTUNE))

    def decode_epochs(root, cache):
        images = folder(root).map(load_image, num_parallel_calls=AUTOTUNE, name="load")
        if cache:
            images = images.cache()
        return (images.shuffle(1000).batch(BATCH).map(flip, name="flip").prefetch(AUTOTUNE))

    def pil_load(path):
        from PIL import Image  # noqa: PLC0415 - only this case needs Pillow

        with Image.open(path.numpy().decode()) as image:
            pixels = np.asarray(image.convert("RGB").resize((SIZE, SIZE)), dtype=np.float32)
        return pixels / 255

    def python_decode():
        return (folder(data["images"])
                .map(lambda p: tf.ensure_shape(tf.py_function(pil_load, [p], tf.float32),
                                               [SIZE, SIZE, 3]), name="pil_load")
                .batch(BATCH).prefetch(AUTOTUNE))

    found = [
        Case("text: TextVectorization map", "20,000 lines", "vectorize",
             lambda: texts().map(lambda t, y: (vectorize(t), y), name="vectorize").batch(BATCH),
             lambda: texts().map(lambda t, y: (vectorize(t), y), num_parallel_calls=AUTOTUNE)
             .batch(BATCH).prefetch(AUTOTUNE)),
        Case("per-file parse in a sequential interleave", "foreign shards", "read_parse",
             lambda: per_file(False).batch(BATCH),
             lambda: per_file(True).batch(BATCH).prefetch(AUTOTUNE)),
        Case("TFRecordDataset(files).shuffle.map.batch", "foreign shards", "parse_decode",
             lambda: user_way(garden, garden_parse), lambda: guide_way(garden, garden_parse)),
        Case("TFRecordDataset(files).shuffle.map.batch", "tfopt's demo shards", "parse_decode",
             lambda: user_way(shards, own_parse), lambda: guide_way(shards, own_parse)),
        Case("decode every epoch, no cache", "demo images", "load",
             lambda: decode_epochs(data["images"], False),
             lambda: decode_epochs(data["images"], True), cached=True),
        Case("decode every epoch, no cache", "camera photos", "load",
             lambda: decode_epochs(data["photos"], False),
             lambda: decode_epochs(data["photos"], True), cached=True),
        Case("already tuned: the guide's recipe", "foreign shards", "parse_decode",
             lambda: guide_way(garden, garden_parse), lambda: guide_way(garden, garden_parse)),
    ]
    try:
        import PIL  # noqa: F401
    except ImportError:
        print("Pillow is not installed: the py_function case is left out", file=sys.stderr)
    else:
        found.append(Case("PIL decode in py_function", "demo images", "pil_load",
                          python_decode, None, cached=True))
    for case in found:
        case.examples = {"20,000 lines": len(text), "camera photos": data["photo_count"]}.get(
            case.data, data["image_count"])
    return found


# ---- measuring -------------------------------------------------------------------------------

def timed_epoch(dataset, case: Case) -> float:
    """Seconds for one epoch of ``dataset`` from a new iterator, drained in-graph to its end
    (a cached pipeline's first such epoch fills its cache)."""
    batches = -(-case.examples // BATCH)  # an epoch's batches, the last one partial
    measured = measure.whole_passes(dataset, 0.0)
    if measured.elements != batches:
        raise RuntimeError(f"{case.name} ({case.data}): an epoch gave {measured.elements} "
                           f"batches, expected {batches}")
    return measured.seconds


def epoch_times(datasets: dict, order: list[str], case: Case, seconds: float) -> dict:
    """Whole epochs of each dataset, every one from a new iterator drained in-graph to its end:
    for each name, (its first epoch's seconds, [the later epochs' seconds]). The first epoch
    is kept apart: where a pipeline caches, it fills the cache.

    The datasets take turns (``order``), in each turn running whole epochs up to their share
    of ``seconds``, until each has run at least ``seconds`` of later epochs: on this shared VM
    single epochs of one unchanged pipeline vary by up to a quarter, and a slow spell then
    falls on all of them rather than on one.
    """
    first = {name: timed_epoch(datasets[name], case) for name in order}
    later = {name: [] for name in order}
    # in SLICES turns, each runs epochs until it has spent its share of the time so far: a
    # cached pipeline's 50-ms epochs must not make an uncached one's 3-s epochs run 60 times
    for turn in range(1, SLICES + 1):
        for name in order:
            while sum(later[name]) < seconds * turn / SLICES or not later[name]:
                later[name].append(timed_epoch(datasets[name], case))
    return {name: (first[name], later[name]) for name in order}


def timed_as(dataset, autotune: bool):
    """``dataset`` as the bench times it: with tf.data's autotuning off where asked."""
    if autotune:
        return dataset
    off = tf.data.Options()
    off.autotune.enabled = False
    return dataset.with_options(off)


def steal_seconds() -> float | None:
    """CPU time the hypervisor has given to other guests since boot (all CPUs), where
    /proc/stat says: a slow first epoch with much steal was this VM's neighbours, not the
    pipeline."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def first_epoch_here(case: Case, name: str, seconds: float, autotune: bool) -> dict:
    """One first epoch of pipeline ``name``, in this (new) process, as a training script meets
    it: the script calls optimize on its pipeline, then trains. Every process calls optimize on
    the original, whichever pipeline it then times, so that each timed first epoch follows the
    same history: the analysis has already started TensorFlow's threads and grown the memory
    allocator's heap, which a first epoch in a fresh process otherwise pays for."""
    result = tfopt.optimize(case.original(), seconds=seconds, report=True)
    dataset = timed_as({"original": case.original, "again": case.original,
                        "tuned": case.tuned, "optimize": lambda: result.dataset}[name](),
                       autotune)
    # the CPU time (every thread of this process) and the steal beside the wall time: they
    # tell a pipeline doing more work apart from a process that was merely slowed
    cpu, steal = time.process_time(), steal_seconds()
    wall = timed_epoch(dataset, case)
    cpu, after = time.process_time() - cpu, steal_seconds()
    return {"seconds": wall, "cpu_seconds": cpu,
            "steal_seconds": None if steal is None or after is None else after - steal}


def first_epochs_in_new_processes(work: Path, index: int, names: list[str], count: int,
                                  seconds: float, autotune: bool,
                                  max_steal: float = MAX_STEAL) -> dict[str, list[dict]]:
    """``count`` first epochs of each pipeline, each in a new Python process running this
    script (first_epoch_here), the pipelines taking turns in alternating order: for each
    pipeline, first_epoch_here's figures from each process kept.

    A first epoch during which the hypervisor gave more than ``max_steal`` of this VM's CPU
    time to other guests is timed again in a new process (up to STEAL_TRIES times; the last
    try is kept whatever its steal, and each kept figure records its tries). Such
    an epoch is slowed by the neighbours, not by its pipeline: on this VM they made single
    first epochs up to twice as slow (3.7 s of 11 s of CPU time stolen). ``max_steal=None``
    keeps every epoch.
    """
    firsts = {name: [] for name in names}
    for turn in range(count):
        for name in names if turn % 2 == 0 else names[::-1]:
            tries = 0
            while True:
                one = first_epoch_in_a_new_process(work, index, name, seconds, autotune)
                tries += 1
                steal = one.get("steal_seconds")
                if (tries == STEAL_TRIES or max_steal is None or steal is None
                        or steal <= max_steal * one["seconds"] * (os.cpu_count() or 1)):
                    break
            firsts[name].append({**one, "tries": tries})
    return firsts


def first_epoch_in_a_new_process(work: Path, index: int, name: str, seconds: float,
                                 autotune: bool) -> dict:
    """first_epoch_here's figures for pipeline ``name`` of case ``index``, from a new Python
    process running this script."""
    command = [sys.executable, __file__, "--work", str(work), "--seconds", str(seconds),
               "--first-epoch-of", str(index), name]
    if not autotune:
        command.append("--autotune-off")
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the first epoch of {name} in a new process failed "
                           f"(exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_case(case: Case, rounds: int, seconds: float, measure_s: float,
             autotune: bool = True, first_epochs=None) -> dict:
    """Each pipeline's rate over all its timed epochs: examples over seconds, summed over the
    rounds: epoch 1 and the later epochs apart where the guide or optimize caches (epoch 1
    fills the cache), else over all epochs.

    Summed, not a median of epochs: the sum is the rate a training run of many epochs gets.
    Each epoch is timed to its last element: its iterator's release, which autotuning now and
    then holds for seconds (docs/benchmarks.md, "An epoch's end"), is left out (measure.whole_passes).
    Where optimize returns the very object it was given, that pipeline is the original: it is
    not timed again, and its rates are the original's.

    ``autotune=False`` times every pipeline with tf.data's autotuning off (AUTOTUNE then means
    fixed defaults): the rewrites compared without autotuning's own choices.
    optimize still analyses with it on (the analysis reads the autotuning model).

    ``first_epochs``: where a pipeline caches, ``first_epochs(names)`` gives each pipeline's
    first epochs timed in new processes (first_epochs_in_new_processes), and those are its
    epoch-1 figure. A first epoch inside this long-running process depends on what came before
    it: where earlier pipelines' caches left freed memory behind, a cache fills at no cost;
    where not, the fill's page faults cost about 0.5 s per GB on this VM. Without it, the
    rounds' own first epochs are used.
    """
    # "again": the original pipeline built a second time and timed beside the first, the run's
    # noise floor (the ratio a pipeline gets against itself here)
    names = ("original", "again", "tuned", "optimize")
    firsts = {name: [] for name in names}
    laters = {name: [] for name in names}
    bottlenecks, analyse_s, optimize_s, changes = [], [], [], set()
    unchanged = []
    for round_ in range(rounds):
        datasets = {"original": case.original(), "again": case.original()}
        if case.tuned is not None:
            datasets["tuned"] = case.tuned()
        given = case.original()
        start = time.perf_counter()
        result = tfopt.optimize(given, seconds=seconds, report=True)
        optimize_s.append(time.perf_counter() - start)
        analyse_s.append(result.analysis.seconds)
        bottlenecks.append(result.analysis.bottleneck)
        changes.update(f"{c.kind}({c.stage})" for c in result.changes)
        unchanged.append(result.dataset is given)
        if not unchanged[-1]:
            datasets["optimize"] = result.dataset
        datasets = {name: timed_as(dataset, autotune) for name, dataset in datasets.items()}
        order = list(datasets)
        order = order[round_ % len(order):] + order[:round_ % len(order)]
        for name, (first, later) in epoch_times(datasets, order, case, measure_s).items():
            firsts[name].append(first)
            laters[name].extend(later)
        del datasets, result, given
    cached = case.cached or any(change.startswith("cache(") for change in changes)
    processes = {}  # where first epochs ran in new processes: each one's figures
    if cached and first_epochs is not None:
        processes = first_epochs([name for name in names if laters[name]])
        firsts = {name: [one["seconds"] for one in runs] for name, runs in processes.items()}

    def rate(epochs: list[float]) -> float:
        return case.examples * len(epochs) / sum(epochs)

    out = {"bottlenecks": bottlenecks, "analyse_s": statistics.median(analyse_s),
           "optimize_s": statistics.median(optimize_s), "changes": sorted(changes),
           "unchanged": sum(unchanged)}
    if processes:  # each new process's figures, for with_interval, first_epoch_work and --raw
        out["first_processes"] = processes
    for name in names:
        if laters[name]:
            out[name] = ((rate(firsts[name]), rate(laters[name])) if cached else
                         (rate(firsts[name] + laters[name]),))
    if "optimize" not in out:  # every round returned the original itself
        out["optimize"] = out["original"]
    return out


def ratio(a, b) -> str:
    return " / ".join(f"{x / y:.2f}x" for x, y in zip(a, b, strict=True))


def first_epoch_interval(seconds: list[float], against: list[float], draws: int = 4000,
                         level: float = 0.90) -> tuple[float, float]:
    """The epoch-1 rate ratio of ``seconds`` against ``against`` (first epochs, one per
    process), as a ``level`` bootstrap interval: each draw resamples both lists with
    replacement and takes mean(against) / mean(seconds). First epochs in new processes vary
    by up to a quarter here, so the ratio alone does not say whether 5 % is inside the noise;
    the interval does."""
    draw = random.Random(0)
    ratios = sorted(
        statistics.fmean(draw.choices(against, k=len(against)))
        / statistics.fmean(draw.choices(seconds, k=len(seconds))) for _ in range(draws))
    tail = (1 - level) / 2
    return ratios[int(tail * draws)], ratios[min(draws - 1, int((1 - tail) * draws))]


def with_interval(out: dict, name: str, against: str, text: str) -> str:
    """``text`` (a ratio cell) with the epoch-1 ratio's 90 % interval after its first
    figure, where both pipelines' first epochs were timed in new processes."""
    processes = out.get("first_processes", {})
    if name not in processes or against not in processes or len(processes[name]) < 3:
        return text
    low, high = first_epoch_interval(*([one["seconds"] for one in processes[pipeline]]
                                       for pipeline in (name, against)))
    head, sep, tail = text.partition(" / ")
    return f"{head} [{low:.2f}-{high:.2f}]{sep}{tail}"


def first_epoch_work(case: Case, processes: dict[str, list[dict]]) -> str:
    """One line per cached case: each pipeline's mean wall, CPU and steal seconds over its
    first epochs in new processes. Equal CPU seconds with unequal wall seconds is a slowed
    process; more CPU seconds is more work."""
    def mean(runs, key):
        values = [run[key] for run in runs if run.get(key) is not None]
        return f"{statistics.fmean(values):.2f}" if values else "n/a"

    cells = [f"{name} {mean(runs, 'seconds')} / {mean(runs, 'cpu_seconds')} / "
             f"{mean(runs, 'steal_seconds')}" for name, runs in processes.items()]
    retimed = sum(run.get("tries", 1) - 1 for runs in processes.values() for run in runs)
    return (f"- {case.name} ({case.data}): " + "; ".join(cells)
            + f" ({retimed} first epoch{'s' if retimed != 1 else ''} timed again for the "
            f"VM's steal)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("bench-optimize"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0, help="optimize's budget")
    parser.add_argument("--measure", type=float, default=3.0,
                        help="seconds of whole epochs per pipeline and round")
    parser.add_argument("--first-epochs", type=int, default=6,
                        help="where a pipeline caches: its first epochs timed, each in a new "
                        "process (0: the rounds' own first epochs instead)")
    parser.add_argument("--autotune-off", action="store_true",
                        help="time every pipeline with tf.data's autotuning off (optimize "
                        "still analyses with it on)")
    parser.add_argument("--keep-steal", action="store_true",
                        help="keep first epochs during which the VM's neighbours took over "
                        f"{MAX_STEAL:.0%} of its CPU time (by default timed again)")
    parser.add_argument("--raw", type=Path,
                        help="write every case's figures, each timed first epoch included, "
                        "to this JSON file")
    parser.add_argument("--only", help="run the cases whose name or data contain one of "
                        "these comma-separated words")
    # the child process behind --first-epochs: one first epoch of one pipeline, printed as JSON
    parser.add_argument("--first-epoch-of", nargs=2, metavar=("CASE", "PIPELINE"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    data = make_data(args.work)
    every_case = cases(data)
    if args.first_epoch_of:
        index, name = args.first_epoch_of
        print(json.dumps(first_epoch_here(every_case[int(index)], name, args.seconds,
                                          autotune=not args.autotune_off)))
        return 0
    print("| pipeline | data | bottleneck named (expected) | optimize: changes | "
          "original ex/s | optimize / original | optimize / guide | original again / original "
          "| analyse s | optimize s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    raw, work_lines = [], []
    for index, case in enumerate(every_case):
        if args.only and not any(word in case.name or word in case.data
                                 for word in args.only.split(",")):
            continue
        first_epochs = None
        if args.first_epochs:
            first_epochs = functools.partial(
                first_epochs_in_new_processes, args.work, index, count=args.first_epochs,
                seconds=args.seconds, autotune=not args.autotune_off,
                max_steal=None if args.keep_steal else MAX_STEAL)
        out = run_case(case, args.rounds, args.seconds, args.measure,
                       autotune=not args.autotune_off, first_epochs=first_epochs)
        raw.append({"case": case.name, "data": case.data, **out})
        named = ", ".join(sorted(set(out["bottlenecks"])))
        same = ("1.00x (the original itself)" if out["unchanged"] == args.rounds else
                with_interval(out, "optimize", "original",
                              ratio(out["optimize"], out["original"]))
                + (f" ({out['unchanged']} of {args.rounds} rounds: the original itself)"
                   if out["unchanged"] else ""))
        mark = "yes" if set(out["bottlenecks"]) == {case.expected} else "NO"
        original = " / ".join(f"{r:,.0f}" for r in out["original"])
        tuned = (with_interval(out, "optimize", "tuned", ratio(out["optimize"], out["tuned"]))
                 if "tuned" in out else "no safe rewrite")
        again = with_interval(out, "again", "original", ratio(out["again"], out["original"]))
        print(f"| {case.name} | {case.data} | {named} ({mark}) | "
              f"{', '.join(out['changes']) or 'none'} | {original} | {same} | {tuned} | "
              f"{again} | {out['analyse_s']:.1f} | "
              f"{out['optimize_s']:.1f} |", flush=True)
        if out.get("first_processes"):
            work_lines.append(first_epoch_work(case, out["first_processes"]))
        if args.raw:  # after every case, so that a long run stopped early keeps what it has
            args.raw.write_text(json.dumps(raw, indent=1))
    first = (f"{args.first_epochs} first epochs per pipeline, each in a new process that "
             f"first calls optimize on the original, as a training script would"
             if args.first_epochs else f"{args.rounds} first epochs per pipeline")
    print(f"\nRows with two figures (the guide or optimize caches): epoch 1, which fills the "
          f"cache ({first}) / the later epochs. Rates over {args.rounds} rounds of "
          f"at least {args.measure:g} s of whole epochs each, the pipelines taking turns: "
          f"examples over seconds, summed. 'original again' is the original built a second "
          f"time and timed beside it: how far two runs of one pipeline differ here. Where "
          f"optimize returned the original itself it is not timed apart. "
          + ("In brackets: the epoch-1 ratio's 90 % bootstrap interval over the new "
             "processes' first epochs. " if args.first_epochs >= 3 else "")
          + ("Autotuning off in every timed pipeline. " if args.autotune_off else "")
          + f"TensorFlow {tf.__version__}, "
          f"{os.cpu_count()} CPUs.")
    if work_lines:
        print(f"\nEpoch 1 in new processes, means per process: wall s, CPU s (every "
              f"thread), the VM's steal s (a first epoch with over {MAX_STEAL:.0%} of the "
              f"VM's CPU time stolen is timed again in a new process, up to {STEAL_TRIES} "
              f"tries; --keep-steal keeps every one)")
        print("\n".join(work_lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
