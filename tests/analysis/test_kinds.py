"""One deliberately flawed small pipeline per recommendation kind, and a good one that gets none
of the wrong kinds. Each asserts the kind and the stage it names."""

from __future__ import annotations

import pytest
from analysis_helpers import random_jpeg, slow, tf

import tfopt
from tfopt.errors import UnsupportedDatasetError

# the analysis's verdicts rest on measured rates: no other test beside them (scripts/test.sh)
pytestmark = pytest.mark.alone

AUTOTUNE = tf.data.AUTOTUNE
SPEED_KINDS = ("parallelize", "prefetch", "cache", "vectorize", "python", "store_smaller",
               "deterministic")
WARNING_KINDS = ("cache_after_random", "shuffle_buffer")


def only(report, kind):
    found = [r for r in report.recommendations if r.kind == kind]
    assert len(found) == 1, report.describe()
    assert found[0].message and "\n" not in found[0].message
    return found[0]


def matmul_work(x):
    m = tf.fill([96, 96], tf.cast(x, tf.float32) * 1e-4)
    return tf.reduce_sum(tf.matmul(m, m))


def test_cache_at_the_highest_stage_that_fits_below_every_random_one():
    dataset = (tf.data.Dataset.range(200)
               .map(matmul_work, num_parallel_calls=AUTOTUNE, name="work")
               .batch(8, name="batches")
               .map(lambda b: b + tf.random.uniform([8]), name="jitter")
               .prefetch(2))
    report = tfopt.analyze(dataset, seconds=1.0, cores=2)
    rec = only(report, "cache")
    assert rec.stage == "batches"  # not after the random map
    assert rec.expected_speedup > 1.1
    assert ".cache()" in rec.message


def test_cache_at_the_top_when_only_a_prefetch_follows():
    # nothing after the cache point costs anything but reading the cache back: the model must
    # still see the speed-up (it once read "no cost left" as "no gain" and advised nothing)
    dataset = (tf.data.Dataset.range(200)
               .map(matmul_work, num_parallel_calls=AUTOTUNE, name="work")
               .batch(8, name="batches").prefetch(2))
    rec = only(tfopt.analyze(dataset, seconds=1.0, cores=2), "cache")
    assert rec.stage == "batches"
    assert rec.expected_speedup > 2


def test_no_cache_where_the_epoch_exceeds_the_ram_budget_or_a_cache_exists():
    dataset = (tf.data.Dataset.range(200).map(matmul_work, num_parallel_calls=AUTOTUNE)
               .batch(8).prefetch(2))
    assert "cache" not in tfopt.analyze(dataset, seconds=0.6, ram_budget=100).kinds()
    cached = tf.data.Dataset.range(200).map(matmul_work).cache().batch(8).prefetch(2)
    assert "cache" not in tfopt.analyze(cached, seconds=0.6).kinds()


def test_vectorize_a_cheap_map_before_a_batch():
    dataset = (tf.data.Dataset.range(1000).repeat().map(lambda x: x * 2 + 1, name="cheap")
               .batch(64).prefetch(2))
    rec = only(tfopt.analyze(dataset, seconds=1.0, cores=2), "vectorize")
    assert rec.stage == "cheap"
    assert rec.expected_speedup > 1.1 and ".batch(64).map(f)" in rec.message


def test_python_stage_behind_the_gil():
    dataset = (tf.data.Dataset.range(10).repeat()
               .map(lambda x: tf.py_function(lambda v: v * 2, [x], tf.int64),
                    num_parallel_calls=AUTOTUNE, name="py")
               .batch(16).prefetch(2))
    report = tfopt.analyze(dataset, seconds=1.0, cores=2)
    rec = only(report, "python")
    assert rec.stage == "py" == report.bottleneck
    assert "GIL" in rec.message and "parallelize" not in report.kinds()


def test_store_smaller_when_decode_dominates_and_images_are_much_larger():
    big_jpeg = random_jpeg(384)
    dataset = (tf.data.Dataset.from_tensors(big_jpeg).repeat()
               .map(tf.io.decode_jpeg, num_parallel_calls=AUTOTUNE, name="decode")
               .map(lambda i: tf.image.resize(i, [48, 48], method="nearest"),
                    num_parallel_calls=AUTOTUNE, name="resize")
               .batch(8).prefetch(2))
    report = tfopt.analyze(dataset, seconds=1.5, cores=2)
    rec = only(report, "store_smaller")
    assert rec.stage == "decode" == report.bottleneck
    assert "tfopt convert --max-size 96" in rec.message


def test_no_store_smaller_when_the_model_sees_the_decoded_size():
    big_jpeg = random_jpeg(384)
    dataset = (tf.data.Dataset.from_tensors(big_jpeg).repeat()
               .map(tf.io.decode_jpeg, num_parallel_calls=AUTOTUNE, name="decode")
               .batch(2).prefetch(2))
    assert "store_smaller" not in tfopt.analyze(dataset, seconds=1.0, cores=2).kinds()


def _jpeg_files(folder, height, width, count=6):
    folder.mkdir()
    for index in range(count):
        pixels = tf.cast(tf.random.stateless_uniform([height, width, 3], [index, 1], maxval=255),
                         tf.uint8)
        (folder / f"{index}.jpg").write_bytes(tf.io.encode_jpeg(pixels).numpy())
    return str(folder / "*.jpg")


def read_decode_resize(path):  # the usual one map: read, decode and resize at once
    image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
    return tf.image.resize(image, [32, 32])


def files_pipeline(pattern):
    """list_files, then one map that reads, decodes and resizes to 32 px: how users write it."""
    return (tf.data.Dataset.list_files(pattern, shuffle=False).repeat()
            .map(read_decode_resize, num_parallel_calls=AUTOTUNE, name="load")
            .batch(4).prefetch(2))


def stage_named(report, label):
    (stage,) = [stage for stage in report.stages if stage.label == label]
    return stage


def test_store_smaller_for_one_map_that_reads_decodes_and_resizes_image_files(tmp_path):
    # the map's output is already 32 px, so only the files' own headers tell that each decode
    # makes 300x the pixels the model sees: this pipeline once got no recommendation at all
    report = tfopt.analyze(files_pipeline(_jpeg_files(tmp_path / "photos", 480, 640)),
                           seconds=1.5, cores=2)
    rec = only(report, "store_smaller")
    assert rec.stage == "load" == report.bottleneck
    assert "stored images of about 640 x 480 px, from sampled headers" in rec.message
    assert "tfopt convert --max-size 64" in rec.message
    assert stage_named(report, "load").stored_size == (480, 640)


def test_store_smaller_for_encoded_images_decoded_and_resized_in_one_map():
    dataset = (tf.data.Dataset.from_tensors(random_jpeg(384)).repeat()
               .map(lambda encoded: tf.image.resize(tf.io.decode_jpeg(encoded), [24, 24]),
                    num_parallel_calls=AUTOTUNE, name="decode_resize")
               .batch(8).prefetch(2))
    rec = only(tfopt.analyze(dataset, seconds=1.5, cores=2), "store_smaller")
    assert rec.stage == "decode_resize" and "about 384 x 384 px" in rec.message


def test_no_store_smaller_for_files_stored_near_the_size_the_model_sees(tmp_path):
    report = tfopt.analyze(files_pipeline(_jpeg_files(tmp_path / "small", 40, 40)),
                           seconds=1.0, cores=2)
    assert "store_smaller" not in report.kinds()
    assert stage_named(report, "load").stored_size == (40, 40)


def test_the_stored_size_is_read_only_from_images_and_image_files(tmp_path):
    from tfopt.analysis.images import _size_of

    (tmp_path / "notes.txt").write_text("not an image")
    (tmp_path / "one.png").write_bytes(tf.io.encode_png(tf.zeros([5, 7, 3], tf.uint8)).numpy())
    assert _size_of(str(tmp_path / "one.png").encode()) == (5, 7)
    assert _size_of(tf.io.encode_png(tf.zeros([3, 2, 1], tf.uint8)).numpy()) == (3, 2)
    for value in (str(tmp_path / "notes.txt").encode(), str(tmp_path / "gone.jpg").encode(),
                  b"with a \x00 byte", b"x" * 5000, b"\xff\xd8 a cut JPEG", str(tmp_path).encode()):
        assert _size_of(value) is None, value


def test_cache_after_random_is_a_correctness_warning():
    dataset = (tf.data.Dataset.range(100)
               .map(lambda x: tf.cast(x, tf.float32) + tf.random.uniform([]), name="noise")
               .cache(name="frozen").batch(4).prefetch(2))
    rec = only(tfopt.analyze(dataset, seconds=0.6), "cache_after_random")
    assert rec.stage == "frozen" and rec.expected_speedup == 1.0
    assert "noise" in rec.message



def test_no_cache_after_random_above_a_shuffle_that_draws_one_order_for_every_pass():
    # the "Load and preprocess images" tutorial: the file list shuffled once, the decoded
    # images cached after it; every pass yields the same order, so the cache replays it
    files = tf.data.Dataset.range(64).shuffle(64, reshuffle_each_iteration=False, name="once")
    dataset = (files.map(matmul_work, num_parallel_calls=AUTOTUNE, name="work")
               .cache(name="kept").shuffle(16, name="mix").batch(8).prefetch(2))
    report = tfopt.analyze(dataset, seconds=1.0, cores=2)
    assert not report.stage("once").random and report.stage("mix").random
    assert "cache_after_random" not in report.kinds(), report.describe()


def test_a_zip_of_tensor_slices_is_the_source_of_the_chain():
    # Keras's image/audio/text_dataset_from_directory zip paths and labels this way
    paths = tf.data.Dataset.from_tensor_slices([f"f{i}" for i in range(400)])
    labels = tf.data.Dataset.from_tensor_slices(list(range(400)))
    dataset = (tf.data.Dataset.zip((paths, labels)).shuffle(400, name="mix")
               .map(lambda p, y: (slow(tf.strings.length(p)), y), name="work")
               .batch(8, name="batches"))
    report = tfopt.analyze(dataset, seconds=1.0, cores=2)
    assert [s.op for s in report.stages][:2] == ["ZipDataset", "ShuffleDatasetV3"]
    assert report.bottleneck == "work", report.describe()
    # a zip whose inputs do work of their own is still refused, naming the op
    with pytest.raises(UnsupportedDatasetError, match="ZipDataset"):
        tfopt.analyze(tf.data.Dataset.zip((paths, labels.map(lambda y: y + 1))), seconds=0.5)

@pytest.mark.parametrize("buffer, epoch, why", [(4, 10**5, "below one batch"),
                                               (40, 10**5, "below 1%")])
def test_shuffle_buffer_too_small_to_mix(buffer, epoch, why):
    dataset = (tf.data.Dataset.range(epoch).shuffle(buffer, name="mix").batch(32)
               .prefetch(2))
    rec = only(tfopt.analyze(dataset, seconds=0.5), "shuffle_buffer")
    assert rec.stage == "mix" and rec.expected_speedup == 1.0 and why in rec.message


def test_shuffle_buffer_over_the_ram_budget():
    dataset = (tf.data.Dataset.range(10**5).map(lambda x: tf.fill([256], x), name="rows")
               .shuffle(10**4, name="mix").batch(32).prefetch(2))
    rec = only(tfopt.analyze(dataset, seconds=0.6, ram_budget=1 << 20), "shuffle_buffer")
    assert rec.stage == "mix" and "RAM budget" in rec.message


def _uneven(x):
    """Every 16th element waits 30 ms in TensorFlow's own sleep (no CPU, no Python: neither the
    VM's load nor the GIL blurs the gap; a time.sleep in a py_function measured 0.94x-1.54x)."""
    def wait():
        one = tf.data.Dataset.from_tensors(x)
        slept = tf.raw_ops.SleepDataset(
            input_dataset=tf.data.experimental.to_variant(one),
            sleep_microseconds=tf.constant(30000, tf.int64), output_types=[tf.int64],
            output_shapes=[[]])
        return tf.data.experimental.from_variant(slept, one.element_spec).get_single_element()

    return tf.cond(x % 16 == 0, wait, lambda: x)


def test_deterministic_order_that_costs_measured_speed():
    dataset = (tf.data.Dataset.range(10**6).shuffle(100)
               .map(_uneven, num_parallel_calls=4, deterministic=True, name="uneven")
               .prefetch(2))
    # measured 2.0x-3.2x out of order over eight analyses
    rec = only(tfopt.analyze(dataset, seconds=6.0, cores=2), "deterministic")
    assert rec.stage == "uneven" and rec.expected_speedup >= 1.15
    assert "deterministic=False" in rec.message


def test_a_good_pipeline_gets_none_of_the_wrong_kinds():
    dataset = (tf.data.Dataset.range(10**4).shuffle(10**4, name="mix")
               .map(slow, num_parallel_calls=AUTOTUNE, deterministic=False, name="slow")
               .batch(16).prefetch(AUTOTUNE))
    report = tfopt.analyze(dataset, seconds=1.5, cores=2)
    assert report.bottleneck == "slow"
    assert not set(report.kinds()) & set(SPEED_KINDS + WARNING_KINDS), report.describe()
