"""The pipeline builder: decoded pixels, crops, exactly-once evaluation, labels, corruption,
caching by budget, reproducibility, non-image data, and MirroredStrategy."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import TWO_LOGICAL_CPUS, encode_jpeg, encode_png, folder_of, random_pixels

import tfopt
from tfopt.data.decode import (
    CROP_AREA,
    CROP_ASPECT,
    decode_to_target,
    random_crop_window,
    snap_to_block_column,
)
from tfopt.data.pipeline import PipelineBuilder, build_pipeline
from tfopt.data.plan import CacheFallback, CacheMode, choose_decode
from tfopt.data.plan_types import DecodeStrategy, DistributionSource, Sharding
from tfopt.data.sizes import records_per_block
from tfopt.errors import InvalidArgumentError


def test_evaluation_yields_every_record_exactly_once_with_its_label(indexed_png_dataset):
    builder = PipelineBuilder(indexed_png_dataset, batch_size=7, image_size=24, split="train")
    assert builder.choices.decode.strategy is DecodeStrategy.PLAIN  # PNG
    seen = []
    for images, labels in builder.build():
        assert images.dtype.name == "uint8" and images.shape[1:] == (24, 24, 3)
        for image, label in zip(images.numpy(), labels.numpy(), strict=True):
            index = int(round(image.mean() / 5))
            assert label == index % 4  # the label travelled with its image
            seen.append(index)
    assert sorted(seen) == list(range(40))
    assert builder.steps_per_epoch == 6  # ceil(40 / 7), no drop_remainder for evaluation


def test_a_pass_has_a_known_length_only_where_it_is_sure(indexed_png_dataset, monkeypatch):
    # known: Keras then knows a validation pass's steps (no "ran out of data" warning)
    evaluation = PipelineBuilder(indexed_png_dataset, batch_size=7, image_size=24,
                                 split="train").build()
    assert int(evaluation.cardinality()) == 6 == sum(1 for _ in evaluation)
    unknown = -2  # tf.data.UNKNOWN_CARDINALITY
    skipping = PipelineBuilder(indexed_png_dataset, batch_size=7, image_size=24,
                               skip_corrupt=True, split="train")
    assert int(skipping.build().cardinality()) == unknown  # skipped records would shorten it
    training = PipelineBuilder(indexed_png_dataset, batch_size=7, image_size=24, training=True)
    assert int(training.build().cardinality()) == -1  # repeats: infinite
    # several workers, sharded by file: each worker reads a shorter pass than the manifest says
    def workers(count):
        monkeypatch.setenv("TF_CONFIG", json.dumps(
            {"cluster": {"worker": [f"localhost:{port}" for port in range(1, count + 1)]},
             "task": {"type": "worker", "index": 0}}))

    workers(2)
    sharded = PipelineBuilder(indexed_png_dataset, batch_size=7, image_size=24, split="train")
    assert sharded.plan.sharding is Sharding.FILE
    assert int(sharded.build().cardinality()) == unknown
    # more workers than shards: each filters the whole pass (DATA), whose length it knows, so
    # that Keras's evaluation under the strategy takes exactly its steps
    workers(4)
    filtered = PipelineBuilder(indexed_png_dataset, batch_size=7, image_size=24, split="train")
    assert filtered.plan.sharding is Sharding.DATA
    dataset = filtered.build()
    assert int(dataset.cardinality()) == 6 == sum(1 for _ in dataset)


def test_each_worker_reads_its_own_shards_and_the_pipeline_stays_shardable(
        indexed_png_dataset, monkeypatch, tf):
    from tensorflow.python.data.experimental.ops.distribute import _AutoShardDataset

    def indices(builder):
        return sorted(int(round(image.mean() / 5)) for images, _ in builder.build()
                      for image in images.numpy())

    def tf_config(task_type, index, chief=False):
        cluster = {"worker": ["localhost:1", "localhost:2"]}
        if chief:
            cluster["chief"] = ["localhost:0"]
        monkeypatch.setenv("TF_CONFIG", json.dumps(
            {"cluster": cluster, "task": {"type": task_type, "index": index}}))

    everything = indices(PipelineBuilder(indexed_png_dataset, batch_size=7, image_size=24,
                                         split="train"))
    # two workers, three shards: worker 0 reads shards 0 and 2, worker 1 shard 1; nothing twice
    seen = []
    for index in (0, 1):
        tf_config("worker", index)
        builder = PipelineBuilder(indexed_png_dataset, batch_size=7, image_size=24, split="train")
        assert builder.plan.sharding is Sharding.FILE
        assert (builder.plan.worker_index, builder.plan.workers) == (index, 2)
        seen.append(indices(builder))
    assert seen[0] and seen[1] and sorted(seen[0] + seen[1]) == everything
    # a chief comes first: chief, worker 0, worker 1 read shards 0, 1, 2
    tf_config("worker", 1, chief=True)
    assert len(indices(PipelineBuilder(indexed_png_dataset, batch_size=7, image_size=24,
                                       split="train"))) in (13, 14)
    # what MultiWorkerMirroredStrategy does to a pipeline (training numbers its images for the
    # crop seeds): tf.data's FILE policy refused it ("unshardable source"); with the builder's
    # own file sharding the policy is off and the rewrite passes it through
    tf_config("worker", 0)
    training = PipelineBuilder(indexed_png_dataset, batch_size=7, image_size=24, training=True)
    distributed = _AutoShardDataset(training.build(), 2, 0)
    images, _ = next(iter(distributed))
    assert images.shape[1:] == (24, 24, 3)


def test_plain_decode_matches_a_reference_decode(tmp_path, tf):
    pixels = random_pixels(3, 64, 80)
    folder = folder_of(tmp_path, {"a/x.png": encode_png(pixels)})
    tfopt.convert(folder, tmp_path / "shards", workers=1)
    images = next(iter(build_pipeline(tmp_path / "shards", 1, image_size=(48, 48),
                                      split="train")))[0]
    crop = pixels[4:60, 12:68]  # a centred square of 87.5 % of the shorter side
    reference = tf.cast(tf.round(tf.image.resize(crop, (48, 48))), tf.uint8).numpy()
    assert np.abs(images[0].numpy().astype(int) - reference.astype(int)).max() <= 1


def test_jpeg_crop_decode_matches_decoding_everything_then_cropping(tmp_path, tf):
    xs, ys = np.meshgrid(np.linspace(0, 255, 96), np.linspace(255, 0, 72))
    smooth = np.stack([xs, ys, np.full((72, 96), 128.0)], axis=-1).astype(np.uint8)
    data = encode_jpeg(smooth, quality=95)
    folder = folder_of(tmp_path, {"a/x.jpg": data})
    tfopt.convert(folder, tmp_path / "shards", workers=1)
    builder = PipelineBuilder(tmp_path / "shards", batch_size=1, image_size=40, split="train")
    assert builder.choices.decode.strategy is DecodeStrategy.CROP  # 63 / 2 < 40: no ratio
    got = next(iter(builder.build()))[0][0].numpy().astype(int)
    full = tf.io.decode_jpeg(data, channels=3)
    crop = full[4:67, 16:79]  # a centred square of 87.5 % of the shorter side
    reference = tf.image.resize(crop, (40, 40)).numpy()
    assert np.abs(got - reference).mean() < 3


def test_random_crop_windows_stay_in_bounds_and_in_range(tf):
    for seed in range(50):
        shape = tf.constant([300 + seed, 500 - seed, 3])
        y, x, h, w = random_crop_window(shape, tf.constant([seed, 7])).numpy()
        assert 0 <= y and 0 <= x and y + h <= 300 + seed and x + w <= 500 - seed
        assert h > 0 and w > 0
        area = h * w / ((300 + seed) * (500 - seed))
        assert area >= CROP_AREA[0] * 0.95 or area == 1.0
        assert CROP_ASPECT[0] * 0.9 <= w / h <= CROP_ASPECT[1] * 1.1 or area == 1.0


def test_random_crop_windows_snap_to_a_jpeg_block_column_inside_the_image(tf):
    moved = []
    for seed in range(200):
        height, width = 300 + seed % 7, 333 + seed
        window = random_crop_window(tf.constant([height, width, 3]), tf.constant([seed, 3]))
        y, x, h, w = window.numpy()
        sy, sx, sh, sw = snap_to_block_column(window, tf.constant(width)).numpy()
        assert sx % 16 == 0 and 0 <= sx and sx + sw <= width  # aligned, and still inside
        assert (sy, sh, sw) == (y, h, w)  # only the left edge moves: same scale and aspect
        assert abs(sx - x) <= 15
        moved.append(sx - x)
    assert -8 <= float(np.mean(moved)) <= 8 and min(moved) < 0 < max(moved)  # both ways


def test_training_crops_decode_the_same_pixels_as_a_full_decode_then_crop(tmp_path, tf):
    """The cropped decode at a snapped window gives the full decode's pixels for that window."""
    xs, ys = np.meshgrid(np.linspace(0, 255, 200), np.linspace(255, 0, 150))
    smooth = np.stack([xs, ys, (xs + ys) / 2], axis=-1).astype(np.uint8)
    data = tf.constant(encode_jpeg(smooth, quality=95))
    plan = choose_decode(encoding="jpeg", random_crop=True, target=(96, 96), min_side=150,
                         cache_decoded=False)
    assert plan.strategy is DecodeStrategy.CROP
    full = tf.io.decode_jpeg(data, channels=3)
    for seed in range(10):
        got = decode_to_target(data, plan, tf.constant([seed, 0], tf.int64)).numpy()
        window = snap_to_block_column(
            random_crop_window(tf.constant([150, 200, 3]), tf.constant([seed, 0], tf.int64)),
            tf.constant(200))
        y, x, h, w = window.numpy()
        reference = tf.image.resize(full[y:y + h, x:x + w], (96, 96)).numpy()
        assert np.abs(got.astype(float) - reference).mean() < 2


def test_counting_and_parsing_blocks_hold_about_a_mebibyte_of_records(indexed_png_dataset):
    assert records_per_block(68_000, 128) == 15  # JPEG photos: a short wait for the first block
    assert records_per_block(100, 128) == 128  # small records: the most, to amortise the op
    assert records_per_block(50_000_000, 256) == 8  # huge records: still a few per block
    builder = PipelineBuilder(indexed_png_dataset, batch_size=4, image_size=24, split="train")
    assert builder.plan.parse_block == records_per_block(builder.source.mean_record_bytes, 128)
    assert builder.plan.count_block == records_per_block(builder.source.mean_record_bytes, 256)


def test_cache_follows_the_ram_budget(indexed_png_dataset, tmp_path):
    def cache_of(**kwargs):
        return PipelineBuilder(indexed_png_dataset, batch_size=4, image_size=24,
                               training=True, **kwargs)
    assert cache_of(ram_budget=1 << 30).choices.cache is CacheMode.DECODED
    small = cache_of(ram_budget=int(20_000 / 0.6))  # too small for decoded, fits the records
    assert small.choices.cache is CacheMode.ENCODED
    assert small.plan.cache_fallback is CacheFallback.TOO_LARGE
    assert cache_of(ram_budget=1000).choices.cache is CacheMode.NONE
    assert cache_of(cache=False).choices.cache is CacheMode.NONE
    path = tmp_path / "cache" / "train"
    path.parent.mkdir()
    builder = PipelineBuilder(indexed_png_dataset, batch_size=8, image_size=24, cache=str(path),
                              split="train")
    for _ in builder.build():
        pass
    assert list(path.parent.iterdir()), "the file cache was not written"


def test_training_batches_are_reproducible_with_a_seed(indexed_png_dataset):
    def first_batches(seed):
        dataset = PipelineBuilder(indexed_png_dataset, batch_size=8, image_size=24,
                                  training=True, seed=seed).build()
        return [batch[0].numpy() for batch in dataset.take(6)]  # crosses an epoch boundary

    one, two, other = first_batches(5), first_batches(5), first_batches(6)
    assert all((a == b).all() for a, b in zip(one, two, strict=True))
    assert any((a != b).any() for a, b in zip(one, other, strict=True))


def test_corrupt_record_names_the_shard_or_is_skipped_and_counted(indexed_png_dataset, tf):
    shard = sorted(indexed_png_dataset.glob("train-*"))[1]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x55
    shard.write_bytes(bytes(data))
    manifest = tfopt.read_manifest(indexed_png_dataset)
    with pytest.raises(tf.errors.InvalidArgumentError, match=shard.name):
        for _ in build_pipeline(indexed_png_dataset, 8, image_size=24, split="train"):
            pass
    builder = PipelineBuilder(indexed_png_dataset, batch_size=8, image_size=24, skip_corrupt=True,
                              split="train")
    read = sum(int(images.shape[0]) for images, _ in builder.build())
    lost = builder.corrupt_records
    assert lost > 0 and read + lost == manifest.num_records


def test_a_first_shard_corrupt_from_its_first_record_is_the_pipelines_to_report(
        indexed_png_dataset, tf):
    # the schema sample reads on into the next shard instead of failing the builder, so the
    # pipeline names the shard, or skips and counts it
    shard = sorted(indexed_png_dataset.glob("train-*"))[0]
    data = bytearray(shard.read_bytes())
    data[20] ^= 0x55  # inside the first record
    shard.write_bytes(bytes(data))
    with pytest.raises(tf.errors.InvalidArgumentError, match=shard.name):
        for _ in build_pipeline(indexed_png_dataset, 8, image_size=24, split="train"):
            pass
    builder = PipelineBuilder(indexed_png_dataset, batch_size=8, image_size=24, skip_corrupt=True,
                              split="train")
    read = sum(int(images.shape[0]) for images, _ in builder.build())
    assert read > 0 and read + builder.corrupt_records == 40


def test_non_image_data_parses_per_batch_with_exact_values(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {"pixels": rng.integers(0, 256, (30, 4, 4), dtype=np.uint8),
              "x": rng.standard_normal((30, 3)).astype(np.float32),
              "precise": rng.standard_normal(30), "label": np.arange(30) % 3,
              "name": np.asarray([f"row{i}" for i in range(30)])}
    np.savez(tmp_path / "data.npz", **arrays)
    tfopt.convert(tmp_path / "data.npz", tmp_path / "shards", workers=1, shards=2)
    builder = PipelineBuilder(tmp_path / "shards", batch_size=8, split="train")
    rows = {}
    for features, labels in builder.build():
        assert features["pixels"].dtype.name == "uint8" and features["pixels"].shape[1:] == (4, 4)
        for i, name in enumerate(features["name"].numpy()):
            rows[int(name[3:])] = {key: value[i].numpy() for key, value in features.items()}
            assert labels[i].numpy() == int(name[3:]) % 3
    assert sorted(rows) == list(range(30))
    for i, row in rows.items():
        np.testing.assert_array_equal(row["pixels"], arrays["pixels"][i])
        np.testing.assert_array_equal(row["x"], arrays["x"][i])
        assert row["precise"] == arrays["precise"][i]  # float64 travelled as raw bytes


def test_variable_length_features_are_ragged_or_padded(tmp_path, tf):
    path = tmp_path / "var.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for i in range(6):
            feature = {"tokens": tf.train.Feature(int64_list=tf.train.Int64List(value=range(i + 1))),
                       "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 2]))}
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature))
                         .SerializeToString())
    features, labels = next(iter(build_pipeline(str(path), 6)))
    assert isinstance(features["tokens"], tf.RaggedTensor)
    assert features["tokens"].row_lengths().numpy().tolist() == [1, 2, 3, 4, 5, 6]
    padded, _ = next(iter(build_pipeline(str(path), 6, pad_ragged=True)))
    assert padded["tokens"].shape == (6, 6) and padded["tokens"].numpy()[0].tolist() == [0, 0, 0, 0, 0, 0]


@pytest.mark.parametrize("encode", [encode_png, encode_jpeg])
@pytest.mark.parametrize("cache", ["auto", False])
def test_training_paths_keep_each_label_with_its_image(tmp_path, encode, cache):
    """Constant-colour images: any crop keeps the colour, which names the image's index."""
    suffix = ".png" if encode is encode_png else ".jpg"
    folder = folder_of(tmp_path, {f"c{i % 4}/{i:03d}{suffix}":
                                   encode(np.full((48, 60, 3), i * 5, np.uint8)) for i in range(40)})
    tfopt.convert(folder, tmp_path / "shards", workers=1, shards=3)
    builder = PipelineBuilder(tmp_path / "shards", batch_size=8, training=True, image_size=20,
                              cache=cache, seed=3)
    expected = {"auto": CacheMode.DECODED, False: CacheMode.NONE}[cache]
    assert builder.choices.cache is expected
    seen = set()
    for images_batch, labels in builder.build().take(12):  # 96 examples: over two epochs
        for image, label in zip(images_batch.numpy(), labels.numpy(), strict=True):
            index = int(round(image.astype(float).mean() / 5))
            assert label == index % 4
            seen.add(index)
    assert len(seen) == 40


def test_a_small_model_learns_the_demo_data_through_the_pipeline(tmp_path):
    import keras

    tfopt.make_demo_data(tmp_path / "images", count=600, classes=4, min_size=48, max_size=64,
                         workers=1)
    tfopt.convert(tmp_path / "images", tmp_path / "shards", workers=1, val_fraction=0.2)
    # central crops: random-resized crops of 8 % can cut the shape out, too hard for 15 epochs
    train = PipelineBuilder(tmp_path / "shards", batch_size=32, training=True, image_size=40,
                            seed=1, random_crop=False)
    validation = build_pipeline(tmp_path / "shards", 32, image_size=40)
    keras.utils.set_random_seed(1)
    model = keras.Sequential([
        keras.Input((40, 40, 3), dtype="uint8"),
        keras.layers.Rescaling(1 / 255),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(64, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(64, 3, activation="relu"),
        keras.layers.GlobalMaxPooling2D(),
        keras.layers.Dense(4),
    ])
    model.compile(keras.optimizers.Adam(3e-3),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    model.fit(train.build(), steps_per_epoch=train.steps_per_epoch, epochs=15, verbose=0)
    _, accuracy = model.evaluate(validation, verbose=0)
    assert accuracy > 0.5, accuracy  # chance is 0.25


@pytest.mark.slow
def test_pipeline_under_mirrored_strategy_on_two_logical_cpus(indexed_png_dataset):
    # with a damaged shard skipped: the lost-record count must work under the strategy's scope
    # too (a tf.Variable made there is mirrored, and tf.data cannot update it)
    shard = sorted(indexed_png_dataset.glob("train-*"))[1]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x55
    shard.write_bytes(bytes(data))
    script = textwrap.dedent(f"""
        import tensorflow as tf, keras
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        from tfopt.data.pipeline import PipelineBuilder
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        with strategy.scope():
            builder = PipelineBuilder({str(indexed_png_dataset)!r}, batch_size=8,
                                      training=True, image_size=16, seed=0,
                                      skip_corrupt=True)
            model = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Rescaling(1 / 255),
                                      keras.layers.Flatten(), keras.layers.Dense(4)])
            model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        history = model.fit(builder.build(), steps_per_epoch=builder.steps_per_epoch,
                            epochs=2, verbose=0)
        print("REPLICAS", strategy.num_replicas_in_sync, "DROP", builder.choices.drop_remainder,
              "STEPS", builder.steps_per_epoch, "LOSS", history.history["loss"][-1],
              "LOST", builder.corrupt_records)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "REPLICAS 2 DROP True STEPS 5" in result.stdout
    lost = int(result.stdout.split("LOST")[1])
    assert 0 < lost < 40


def test_device_crop_ships_margin_squares_for_the_model_to_crop(indexed_png_dataset):
    builder = PipelineBuilder(indexed_png_dataset, batch_size=8, training=True, image_size=24,
                              random_crop="device", seed=0)
    assert builder.plan.device_crop and builder.plan.model_side == 24
    images, labels = next(iter(builder.build()))
    assert images.shape == (8, 27, 27, 3)  # 24 x 256/224, the whole central square
    for image, label in zip(images.numpy(), labels.numpy(), strict=True):
        assert label == int(round(image.mean() / 5)) % 4
    with pytest.raises(InvalidArgumentError, match="random_crop='gpu'"):
        PipelineBuilder(indexed_png_dataset, batch_size=8, image_size=24, random_crop="gpu")


def test_a_malformed_tf_config_is_named_instead_of_meaning_one_worker(indexed_png_dataset,
                                                                      monkeypatch):
    # it used to fall back to one worker silently: every worker then read every shard
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["localhost:1"]')
    with pytest.raises(InvalidArgumentError, match="TF_CONFIG"):
        tfopt.PipelineBuilder(indexed_png_dataset, batch_size=7, image_size=24, split="train")


def test_camera_photos_are_cached_reduced_and_still_shuffled_within_the_stream(tmp_path):
    """8 JPEGs of 4000x3000 px in one shard, one class each (the label names the record): with
    the cache on, decoded images go in at 1/8 scale and the shuffle buffer holds all 8. Sized
    from full-size images (36 MB each) it held one, and records came in the stored order."""
    from conftest import read_examples

    height, width = 3000, 4000
    ramp = np.linspace(0, 255, width, dtype=np.float32)[None, :, None]
    for index in range(8):
        folder = tmp_path / "photos" / f"class{index}"
        folder.mkdir(parents=True)
        # smooth content: a 12-megapixel JPEG of a few hundred KB
        pixels = np.broadcast_to((ramp + 29 * index) % 256, (height, width, 3)).astype(np.uint8)
        (folder / "photo.jpg").write_bytes(encode_jpeg(pixels, quality=80))
    tfopt.convert(tmp_path / "photos", tmp_path / "shards", workers=1, shards=1)
    stored = [int(example.features.feature["image/class/label"].int64_list.value[0])
              for example in read_examples(tmp_path / "shards")]

    builder = PipelineBuilder(tmp_path / "shards", batch_size=8, image_size=224,
                              training=True, cache=True, seed=1)
    assert builder.plan.decode.ratio == 8 and builder.plan.shuffle_elements >= 8
    # the estimate comes from the sampled images' own sizes
    assert set(builder.source.image_sizes) == {(height, width)}
    assert builder.plan.cache_estimate_bytes == 8 * (width // 8) * (height // 8) * 3
    batches = builder.build().take(3)  # three epochs of one batch: the first fills the cache
    orders = [labels.numpy().tolist() for _, labels in batches]
    assert all(sorted(order) == sorted(stored) for order in orders)  # each record once
    assert any(order != stored for order in orders)  # mixed within the stream


def test_an_input_context_plans_the_same_inside_and_outside_a_strategy_scope(
        indexed_png_dataset):
    # the distribution is read once, from what was given: a strategy's scope no longer changes
    # the plan of the same call, unless nothing was given (then the active strategy is read)
    script = TWO_LOGICAL_CPUS + textwrap.dedent(f"""
        import dataclasses
        from tfopt.data.pipeline import PipelineBuilder
        from tfopt.data.plan_types import DistributionSource
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        def make(**kwargs):
            # a fixed RAM budget: the default follows MemAvailable, read at each construction,
            # which other processes move between two of them (a plan differed by it under CI)
            return PipelineBuilder({str(indexed_png_dataset)!r}, batch_size=8, training=True,
                                   image_size=16, seed=0, ram_budget=1 << 30, **kwargs)
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1,
                                             num_replicas_in_sync=4)
        outside, outside_ctx, outside_none = make(input_context=strategy), make(
            input_context=context), make()
        with strategy.scope():
            inside, inside_ctx, inside_none = make(input_context=strategy), make(
                input_context=context), make()
        print(json.dumps({{
            "strategy_same": outside.plan == inside.plan,
            "context_same": outside_ctx.plan == inside_ctx.plan,
            "active_as_given": dataclasses.replace(
                inside_none.plan, distribution=DistributionSource.STRATEGY) == inside.plan,
            "no_scope_differs": outside_none.plan != inside_none.plan,
            "drop": [outside.plan.drop_remainder, outside_none.plan.drop_remainder],
            "context": [outside_ctx.plan.workers, outside_ctx.plan.worker_index,
                        outside_ctx.plan.replicas, outside_ctx.plan.sharding.value],
            "distribution": [[b.plan.replicas, b.plan.workers, b.plan.distribution.value]
                             for b in (inside, inside_ctx, inside_none)],
        }}))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["strategy_same"] and found["context_same"] and found["active_as_given"]
    assert found["no_scope_differs"] and found["drop"] == [True, False]
    assert found["context"] == [2, 1, 4, "file"]
    assert found["distribution"] == [[2, 1, DistributionSource.STRATEGY.value],
                                     [4, 2, DistributionSource.INPUT_CONTEXT.value],
                                     [2, 1, DistributionSource.ACTIVE.value]]


def test_an_input_context_of_another_type_is_refused(indexed_png_dataset):
    with pytest.raises(InvalidArgumentError, match=r"input_context='two workers': expected a "
                       r"tf.distribute.InputContext, a tf.distribute.Strategy, or None"):
        PipelineBuilder(indexed_png_dataset, batch_size=8, image_size=16, split="train",
                        input_context="two workers")


# -- planning again on what was read once -------------------------------------------------------


def _counting_reads(monkeypatch):
    """Count the calls of the source's resolution and the shards' header walk (the real
    functions still run): what a replanned builder must not repeat."""
    import tfopt.data.pipeline as pipeline

    calls = {"resolve_source": 0, "read_limits": 0}
    for name in calls:
        real = getattr(pipeline, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(pipeline, name, counted)
    # the same memory for every builder, so that a builder made afresh plans on the same facts
    monkeypatch.setattr(pipeline, "available_memory", lambda: 8 << 30)
    return calls


def _pass_of(builder, batches):
    return [(images.numpy(), labels.numpy()) for images, labels in builder.build().take(batches)]


def test_replanned_runs_only_the_planner_and_plans_as_a_builder_made_afresh(
        indexed_png_dataset, monkeypatch):
    calls = _counting_reads(monkeypatch)
    builder = PipelineBuilder(indexed_png_dataset, batch_size=8, image_size=24, training=True,
                              seed=3)
    assert calls == {"resolve_source": 1, "read_limits": 1}
    assert builder.plan.cache is CacheMode.DECODED
    uncached = builder.replanned(cache=False)
    assert calls == {"resolve_source": 1, "read_limits": 1}  # no second resolution or walk
    fresh = PipelineBuilder(indexed_png_dataset, batch_size=8, image_size=24, training=True,
                            seed=3, cache=False)
    assert uncached.plan == fresh.plan and uncached.facts == fresh.facts
    assert uncached.choices == fresh.choices and uncached.source == fresh.source
    assert builder.plan.cache is CacheMode.DECODED  # the first is left as it was
    # the same batches, past the end of the first pass (5 batches hold the 40 records)
    for (a_images, a_labels), (b_images, b_labels) in zip(
            _pass_of(uncached, 7), _pass_of(fresh, 7), strict=True):
        assert (a_images == b_images).all() and (a_labels == b_labels).all()
    # a field that changes what is read reads the source again, as a new builder would
    evaluation = builder.replanned(split="train", training=False)
    assert calls == {"resolve_source": 3, "read_limits": 3}  # fresh's, and this one's
    assert evaluation.plan == PipelineBuilder(indexed_png_dataset, batch_size=8, image_size=24,
                                              split="train", seed=3).plan
    with pytest.raises(InvalidArgumentError, match="PipelineBuilder.replanned: unknown option"):
        builder.replanned(cashe=False)


def test_a_fit_of_one_pass_or_less_plans_without_the_cache_and_says_so(
        indexed_png_dataset, monkeypatch):
    calls = _counting_reads(monkeypatch)
    builder = PipelineBuilder(indexed_png_dataset, batch_size=8, image_size=24, training=True,
                              seed=3)
    assert builder.pass_examples == 40 and builder.plan.cache is CacheMode.DECODED
    # more than one pass: the cache serves the rest; unknown length: kept
    assert builder.keeps_cache(41) and builder.for_fit(41) is builder
    assert builder.keeps_cache(None) and builder.for_fit(None) is builder
    for read in (40, 16):
        assert not builder.keeps_cache(read)
        fit = builder.for_fit(read)
        assert calls == {"resolve_source": 1, "read_limits": 1}
        assert fit.plan.cache is CacheMode.NONE
        assert fit.plan.cache_fallback is CacheFallback.ONE_PASS
        (note,) = fit.plan.notes
        assert note.startswith(f"no cache for this read: it takes {read} examples in all")
        # what the fit runs, said: no decoded cache in its description, the note says why
        described = fit.choices.describe()
        assert "cache        none (memory)" in described and "into the cache" not in described
        assert f"note         {note}" in described
        assert "decoded once" in builder.choices.describe()  # the planned one's decode
        assert "the cache is off for this read" in fit.stall_advice()
    # all else as a builder with cache=False plans it, batches included
    fresh = PipelineBuilder(indexed_png_dataset, batch_size=8, image_size=24, training=True,
                            seed=3, cache=False)
    assert fit.plan == dataclasses.replace(fresh.plan, cache_fallback=CacheFallback.ONE_PASS,
                                           notes=(note,))
    for (a_images, a_labels), (b_images, b_labels) in zip(
            _pass_of(fit, 2), _pass_of(fresh, 2), strict=True):
        assert (a_images == b_images).all() and (a_labels == b_labels).all()
    # a cache asked for is kept whatever the read; so is one that is not there
    asked = builder.replanned(cache=True)
    assert asked.keeps_cache(16) and asked.for_fit(16) is asked
    assert fresh.keeps_cache(16) and fresh.for_fit(16) is fresh
