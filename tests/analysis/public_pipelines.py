"""tf.data pipelines other people wrote: public tutorials and examples, reproduced stage for
stage (ops, their order, ``num_parallel_calls`` or not, cache, shuffle and prefetch where the
source puts them) and adapted only to read small synthetic data made by :func:`make_data`.

Each :class:`Pipeline` has its source (URL and section) in its factory's docstring, the
pipeline as the source writes it (``original``), the tf.data performance guide's hand fix of
it (``expert``: ``num_parallel_calls=AUTOTUNE`` on maps, a cache where nothing random is
below it, ``prefetch(AUTOTUNE)``, a map after the batch where the guide's "Vectorizing
mapping" says so), and the verdict ``tfopt.analyze`` should reach. The tests
(``test_public_pipelines.py``) and ``scripts/bench_public_pipelines.py`` share them.

A module of its own, not a conftest (see ``analysis_helpers.py``).
"""

from __future__ import annotations

import random
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tfopt._tf import import_tensorflow

tf = import_tensorflow()
import keras  # noqa: E402

AUTOTUNE = tf.data.AUTOTUNE


@dataclass(frozen=True)
class Verdict:
    """What the analysis should say: the bottleneck stage's op kind (a substring of its op,
    e.g. ``"Map"``) and a heavy op its function runs (None: any; a tuple: one of them, where
    stages cost within 3x of each other and the CPU decides which is slower), the
    recommendations it must make and those it must not."""

    op: str
    heavy: str | tuple[str, ...] | None = None
    python: bool = False
    recommends: frozenset[str] = frozenset()
    never: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Pipeline:
    name: str
    original: object  # (data) -> the tf.data.Dataset as the source writes it
    expert: object  # (data) -> the guide's fix of it
    verdict: Verdict
    # the order of elements is the data's (nothing random): optimize must yield them exactly
    ordered: bool = False
    # elements drawn at random (augmentation): values are compared by spec and labels only
    augmented: bool = False
    # optimize's budget in the tests: the images tutorial's cache fills in one pass, and every
    # prefix's share must hold that pass and more (a prefix timed on its filling pass alone
    # and the next on cached passes once named the batch after the cache the bottleneck)
    seconds: float = 2.0


@dataclass(frozen=True)
class Data:
    """Paths and arrays :func:`make_data` wrote, small enough for the suite."""

    root: Path
    images: Path  # images/<class>/<n>.jpg
    image_count: int
    masks: Path  # pets: images/<n>.jpg and trimaps/<n>.png
    audio: Path  # audio/<word>/<n>.wav
    text: Path  # text/<class>/<n>.txt
    shards: tuple[str, ...]  # TFRecord shards under Model Garden's keys
    volumes: np.ndarray  # CT-like volumes (N, 32, 32, 16) in [0, 1]
    volume_labels: np.ndarray
    pairs: tuple[tuple[str, str], ...]  # English-Spanish sentence pairs


IMAGE_CLASSES = ("cat", "dog")
IMAGES_PER_CLASS = 24
WORDS = ("yes", "no")


def make_data(root: Path, scale: int = 1) -> Data:
    """Write the synthetic inputs every pipeline reads under ``root`` (about 3 MB and 1-4 s
    at ``scale`` 1; ``scale`` multiplies every count, for the benchmark's longer epochs)."""
    rng = np.random.default_rng(0)
    images = root / "images"
    for c, name in enumerate(IMAGE_CLASSES):
        (images / name).mkdir(parents=True, exist_ok=True)
        for i in range(IMAGES_PER_CLASS * scale):
            (images / name / f"{i:03d}.jpg").write_bytes(_jpeg(rng, 240, 320, c))
    masks = root / "pets"
    (masks / "images").mkdir(parents=True, exist_ok=True)
    (masks / "trimaps").mkdir(parents=True, exist_ok=True)
    for i in range(32 * scale):
        (masks / "images" / f"pet_{i:03d}.jpg").write_bytes(_jpeg(rng, 200, 250, i % 2))
        trimap = rng.integers(1, 4, (200, 250, 1), dtype=np.uint8)
        (masks / "trimaps" / f"pet_{i:03d}.png").write_bytes(tf.io.encode_png(trimap).numpy())
    audio = root / "audio"
    for w, word in enumerate(WORDS):
        (audio / word).mkdir(parents=True, exist_ok=True)
        for i in range(16 * scale):
            _write_wav(audio / word / f"{i:03d}.wav", rng, 16000 - 400 * (i % 3), w)
    text = root / "text"
    vocabulary = [f"word{i}" for i in range(400)]
    for c, name in enumerate(("neg", "pos")):
        (text / name).mkdir(parents=True, exist_ok=True)
        for i in range(96 * scale):
            words = rng.choice(vocabulary, size=int(rng.integers(300, 800)))
            body = " ".join(words).replace(" ", "<br />", 1)
            (text / name / f"{i:03d}.txt").write_text(f"Review {c}: {body}!")
    garden = root / "garden"
    garden.mkdir(exist_ok=True)
    files = sorted(images.glob("*/*.jpg"))
    shards = []
    for shard in range(4):
        path = garden / f"train-{shard:05d}-of-00004"
        with tf.io.TFRecordWriter(str(path)) as writer:
            for index, file in enumerate(files[shard::4]):
                feature = {"image/encoded": _bytes_feature(file.read_bytes()),
                           "image/class/label": _int_feature(index % 2)}
                writer.write(tf.train.Example(features=tf.train.Features(
                    feature=feature)).SerializeToString())
        shards.append(str(path))
    volumes = rng.random((16 * scale, 32, 32, 16), dtype=np.float32)
    sentences = random.Random(0)
    english = ["the", "cat", "sees", "a", "dog", "we", "go", "home", "today", "it", "rains"]
    spanish = ["el", "gato", "ve", "un", "perro", "vamos", "a", "casa", "hoy", "llueve", "¿qué?"]
    pairs = tuple(
        (" ".join(sentences.choices(english, k=sentences.randint(3, 12))),
         "[start] " + " ".join(sentences.choices(spanish, k=sentences.randint(3, 12)))
         + " [end]")
        for _ in range(1536 * scale))
    return Data(root=root, images=images, image_count=len(files), masks=masks, audio=audio,
                text=text, shards=tuple(shards), volumes=volumes,
                volume_labels=(np.arange(len(volumes)) % 2).astype(np.float32), pairs=pairs)


def _jpeg(rng, height, width, shade) -> bytes:
    pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    pixels[: height // 2] //= 2 + shade
    return tf.io.encode_jpeg(pixels, quality=90).numpy()


def _write_wav(path: Path, rng, samples: int, tone: int) -> None:
    t = np.arange(samples) / 16000
    signal = 0.3 * np.sin(2 * np.pi * (300 + 200 * tone) * t) + 0.05 * rng.standard_normal(samples)
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(16000)
        out.writeframes((signal * 32767).astype("<i2").tobytes())


def _bytes_feature(value):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def _int_feature(value):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))


# ---- 1. TensorFlow tutorial: Load and preprocess images -------------------------------------

def _image_guide(data: Data, expert: bool):
    """https://www.tensorflow.org/tutorials/load_data/images, section "Using tf.data for finer
    control": ``list_files(shuffle=False)``, a one-time shuffle of the file list
    (``reshuffle_each_iteration=False``), a validation split by ``skip``, ``process_path``
    (label from the folder name, ``decode_jpeg``, ``resize`` to 180 px) with
    ``num_parallel_calls=AUTOTUNE``, then ``configure_for_performance``: ``cache()``,
    ``shuffle(1000)``, ``batch(32)``, ``prefetch(AUTOTUNE)``. It is the guide's recipe already:
    the expert fix is the same pipeline."""
    del expert  # the tutorial is the guide's fix
    class_names = np.array(sorted(p.name for p in data.images.iterdir() if p.is_dir()))
    files = tf.data.Dataset.list_files(str(data.images / "*" / "*"), shuffle=False)
    files = files.shuffle(data.image_count, reshuffle_each_iteration=False)
    val_size = int(data.image_count * 0.2)
    train = files.skip(val_size)

    def get_label(file_path):
        parts = tf.strings.split(file_path, "/")
        return tf.argmax(parts[-2] == class_names)

    def decode_img(img):
        img = tf.io.decode_jpeg(img, channels=3)
        return tf.image.resize(img, [180, 180])

    def process_path(file_path):
        label = get_label(file_path)
        return decode_img(tf.io.read_file(file_path)), label

    train = train.map(process_path, num_parallel_calls=AUTOTUNE)
    return train.cache().shuffle(buffer_size=1000).batch(32).prefetch(buffer_size=AUTOTUNE)


# ---- 2. TensorFlow guide: Better performance with the tf.data API ---------------------------

def _vectorizing_guide(data: Data, expert: bool):
    """https://www.tensorflow.org/guide/data_performance, section "Vectorizing mapping": a
    cheap scalar ``increment`` mapped over ``Dataset.range`` element by element, then
    ``batch(256)`` (the guide's "scalar mapping"); the guide's fix batches first and maps the
    batch ("vectorized mapping"). The guide times 1,000 batches; here a 64k range (one pass
    about 10 ms)."""
    del data

    def increment(x):
        return x + 1

    numbers = tf.data.Dataset.range(65536)
    if expert:
        return numbers.batch(256).map(increment).prefetch(AUTOTUNE)
    return numbers.map(increment).batch(256)


# ---- 3. Keras example: image classification from scratch ------------------------------------

def _classification_from_scratch(data: Data, expert: bool):
    """https://keras.io/examples/vision/image_classification_from_scratch/, sections
    "Generate a Dataset", "Using image data augmentation" and "Configure the dataset for
    performance" (option 2): ``image_dataset_from_directory(validation_split=0.2,
    subset="both", seed=1337, image_size=(180, 180), batch_size=128)`` (here 16), then
    ``map(lambda img, label: (data_augmentation(img), label), num_parallel_calls=AUTOTUNE)``
    with ``RandomFlip("horizontal")`` and ``RandomRotation(0.1)``, and ``prefetch(AUTOTUNE)``.
    Parallel maps and a prefetch already, and a cache would freeze the file order that
    ``image_dataset_from_directory`` shuffles and the random augmentation: the expert fix is
    the same pipeline."""
    del expert
    train, _ = keras.utils.image_dataset_from_directory(
        str(data.images), validation_split=0.2, subset="both", seed=1337,
        image_size=(180, 180), batch_size=16, verbose=False)
    augmentation = [keras.layers.RandomFlip("horizontal"), keras.layers.RandomRotation(0.1)]

    def data_augmentation(images):
        for layer in augmentation:
            images = layer(images)
        return images

    train = train.map(lambda img, label: (data_augmentation(img), label),
                      num_parallel_calls=AUTOTUNE)
    return train.prefetch(AUTOTUNE)


# ---- 4. Keras example: image segmentation with a U-Net (Oxford pets) ------------------------

def _pets_segmentation(data: Data, expert: bool):
    """https://keras.io/examples/vision/oxford_pets_image_segmentation/, section "Prepare
    dataset to load & vectorize batches of data" (``get_dataset``): ``from_tensor_slices`` of
    the image and trimap paths, ``map(load_img_masks, num_parallel_calls=AUTOTUNE)``
    (``read_file``, ``decode_png`` of the JPEG with 3 channels and of the trimap with 1,
    ``resize`` to 160 px, bilinear and nearest, ``convert_image_dtype``, labels minus one),
    ``batch(32)``. Nothing random: the expert fix caches the decoded pairs and prefetches."""
    img_size = (160, 160)
    inputs = sorted(str(p) for p in (data.masks / "images").glob("*.jpg"))
    targets = sorted(str(p) for p in (data.masks / "trimaps").glob("*.png"))

    def load_img_masks(input_img_path, target_img_path):
        input_img = tf.io.read_file(input_img_path)
        input_img = tf.io.decode_png(input_img, channels=3)
        input_img = tf.image.resize(input_img, img_size)
        input_img = tf.image.convert_image_dtype(input_img, "float32")
        target_img = tf.io.read_file(target_img_path)
        target_img = tf.io.decode_png(target_img, channels=1)
        target_img = tf.image.resize(target_img, img_size, method="nearest")
        target_img = tf.image.convert_image_dtype(target_img, "uint8")
        target_img -= 1
        return input_img, target_img

    dataset = tf.data.Dataset.from_tensor_slices((inputs, targets))
    dataset = dataset.map(load_img_masks, num_parallel_calls=AUTOTUNE)
    if expert:
        return dataset.cache().batch(32).prefetch(AUTOTUNE)
    return dataset.batch(32)


# ---- 5. Keras example: 3D image classification from CT scans --------------------------------

def _ct_volumes(data: Data, expert: bool):
    """https://keras.io/examples/vision/3D_image_classification/, sections "Data augmentation"
    and "Define data loaders": ``from_tensor_slices((x_train, y_train))``,
    ``shuffle(len(x_train))``, ``map(train_preprocessing)`` (a random rotation by one of
    +-5/10/20 degrees in ``tf.numpy_function``, clipped to [0, 1], then a channel axis),
    ``batch(2)``, ``prefetch(2)``. The example rotates with ``scipy.ndimage.rotate``; scipy is
    not a dependency here, so the same rotation is nearest-neighbour numpy (the adaptation).
    The guide's fix: ``num_parallel_calls=AUTOTUNE`` on the map, ``prefetch(AUTOTUNE)``."""

    def scipy_rotate(volume):
        angle = np.deg2rad(random.choice([-20, -10, -5, 5, 10, 20]))
        height, width = volume.shape[:2]
        y, x = np.mgrid[:height, :width].astype(np.float32)
        cy, cx = (height - 1) / 2, (width - 1) / 2
        sy = np.rint(cy + (y - cy) * np.cos(angle) - (x - cx) * np.sin(angle)).astype(int)
        sx = np.rint(cx + (y - cy) * np.sin(angle) + (x - cx) * np.cos(angle)).astype(int)
        inside = (sy >= 0) & (sy < height) & (sx >= 0) & (sx < width)
        rotated = np.zeros_like(volume)
        rotated[inside] = volume[sy[inside], sx[inside]]
        return np.clip(rotated, 0, 1).astype(np.float32)

    def rotate(volume):
        rotated = tf.numpy_function(scipy_rotate, [volume], tf.float32)
        return tf.ensure_shape(rotated, volume.shape)

    def train_preprocessing(volume, label):
        volume = rotate(volume)
        return tf.expand_dims(volume, axis=3), label

    loader = tf.data.Dataset.from_tensor_slices((data.volumes, data.volume_labels))
    dataset = loader.shuffle(len(data.volumes))
    if expert:
        return (dataset.map(train_preprocessing, num_parallel_calls=AUTOTUNE).batch(2)
                .prefetch(AUTOTUNE))
    return dataset.map(train_preprocessing).batch(2).prefetch(2)


# ---- 6. TensorFlow tutorial: simple audio recognition ---------------------------------------

def _simple_audio(data: Data, expert: bool):
    """https://www.tensorflow.org/tutorials/audio/simple_audio, sections "Import the mini
    Speech Commands dataset", "Convert waveforms to spectrograms" and "Build and train the
    model": ``audio_dataset_from_directory(batch_size=64, validation_split=0.2, seed=0,
    output_sequence_length=16000, subset="both")`` (here 8 a batch), ``map(squeeze,
    AUTOTUNE)``, ``make_spec_ds`` (``map`` of ``get_spectrogram``: ``tf.signal.stft`` with
    frame length 255 and step 128, ``abs``, a channel axis, ``num_parallel_calls=AUTOTUNE``),
    then ``cache().shuffle(10000).prefetch(AUTOTUNE)``. Parallel maps, a cache and a prefetch:
    the expert fix is the same pipeline."""
    del expert
    train, _ = keras.utils.audio_dataset_from_directory(
        directory=str(data.audio), batch_size=8, validation_split=0.2, seed=0,
        output_sequence_length=16000, subset="both", verbose=False)

    def squeeze(audio, labels):
        return tf.squeeze(audio, axis=-1), labels

    def get_spectrogram(waveform):
        spectrogram = tf.signal.stft(waveform, frame_length=255, frame_step=128)
        spectrogram = tf.abs(spectrogram)
        return spectrogram[..., tf.newaxis]

    train = train.map(squeeze, num_parallel_calls=AUTOTUNE)
    train = train.map(map_func=lambda audio, label: (get_spectrogram(audio), label),
                      num_parallel_calls=AUTOTUNE)
    return train.cache().shuffle(10000).prefetch(AUTOTUNE)


# ---- 7. Keras example: text classification from scratch -------------------------------------

def _text_from_scratch(data: Data, expert: bool):
    """https://keras.io/examples/nlp/text_classification_from_scratch/, sections "Load the
    data", "Prepare the data" and "Two options to vectorize the data" (option 2):
    ``text_dataset_from_directory(batch_size=32, validation_split=0.2, subset="training",
    seed=1337)``, a ``TextVectorization`` (``custom_standardization``: lower case, ``<br />``
    and punctuation stripped; 20,000 tokens, 500 a sequence) adapted on the texts, then
    ``map(vectorize_text)`` (sequential), ``cache()``, ``prefetch(buffer_size=10)``. The guide's
    fix: ``num_parallel_calls=AUTOTUNE`` on the map, ``prefetch(AUTOTUNE)``."""
    raw_train = keras.utils.text_dataset_from_directory(
        str(data.text), batch_size=32, validation_split=0.2, subset="training", seed=1337,
        verbose=False)

    def custom_standardization(input_data):
        lowercase = tf.strings.lower(input_data)
        stripped_html = tf.strings.regex_replace(lowercase, "<br />", " ")
        return tf.strings.regex_replace(stripped_html, "[!\"#$%&()*+,-./:;<=>?@\\[\\\\\\]^_`{|}~']",
                                        "")

    vectorize_layer = keras.layers.TextVectorization(
        standardize=custom_standardization, max_tokens=20000, output_mode="int",
        output_sequence_length=500)
    vectorize_layer.adapt(raw_train.map(lambda x, y: x))

    def vectorize_text(text, label):
        text = tf.expand_dims(text, -1)
        return vectorize_layer(text), label

    if expert:
        return raw_train.map(vectorize_text, num_parallel_calls=AUTOTUNE).cache().prefetch(
            AUTOTUNE)
    return raw_train.map(vectorize_text).cache().prefetch(buffer_size=10)


# ---- 8. Keras example: English-to-Spanish translation with a sequence-to-sequence Transformer

def _translation(data: Data, expert: bool):
    """https://keras.io/examples/nlp/neural_machine_translation_with_transformer/, sections
    "Vectorizing the text data" and "Next, we'll format our datasets" (``make_dataset``):
    two ``TextVectorization`` layers (15,000 tokens; 20 and 21 a sequence; the Spanish one
    with ``custom_standardization``) adapted on the texts, ``from_tensor_slices((eng, spa))``,
    ``batch(64)``, ``map(format_dataset)`` (sequential; encoder and decoder inputs, targets
    shifted by one), ``cache()``, ``shuffle(2048)``, ``prefetch(16)``. The guide's fix:
    ``num_parallel_calls=AUTOTUNE`` on the map, ``prefetch(AUTOTUNE)``."""
    vocab_size, sequence_length = 15000, 20
    strip_chars = "!\"#$%&'()*+,-./:;<=>?@\\^_`{|}~¿".replace("[", "").replace("]", "")

    def custom_standardization(input_string):
        lowercase = tf.strings.lower(input_string)
        escaped = "".join("\\" + c if c in "\\^-]" else c for c in strip_chars)
        return tf.strings.regex_replace(lowercase, f"[{escaped}]", "")

    eng_vectorization = keras.layers.TextVectorization(
        max_tokens=vocab_size, output_mode="int", output_sequence_length=sequence_length)
    spa_vectorization = keras.layers.TextVectorization(
        max_tokens=vocab_size, output_mode="int", output_sequence_length=sequence_length + 1,
        standardize=custom_standardization)
    eng_texts = [pair[0] for pair in data.pairs]
    spa_texts = [pair[1] for pair in data.pairs]
    eng_vectorization.adapt(eng_texts)
    spa_vectorization.adapt(spa_texts)

    def format_dataset(eng, spa):
        eng = eng_vectorization(eng)
        spa = spa_vectorization(spa)
        return ({"encoder_inputs": eng, "decoder_inputs": spa[:, :-1]}, spa[:, 1:])

    dataset = tf.data.Dataset.from_tensor_slices((eng_texts, spa_texts)).batch(64)
    if expert:
        return dataset.map(format_dataset, num_parallel_calls=AUTOTUNE).cache().shuffle(
            2048).prefetch(AUTOTUNE)
    return dataset.map(format_dataset).cache().shuffle(2048).prefetch(16)


# ---- 9. Model Garden: official/vision/dataloaders/classification_input.py -------------------

MEAN_RGB = (0.485 * 255, 0.456 * 255, 0.406 * 255)
STDDEV_RGB = (0.229 * 255, 0.224 * 255, 0.225 * 255)


def _model_garden(data: Data, expert: bool):
    """https://github.com/tensorflow/models/blob/master/official/vision/dataloaders/
    classification_input.py (``Decoder.decode``, ``Parser._parse_train_image`` with
    ``decode_jpeg_only`` and ``aug_crop``) read as ``official/core/input_reader.py`` reads
    it: the shard list shuffled, ``interleave(TFRecordDataset, num_parallel_calls=AUTOTUNE)``,
    ``shuffle``, ``map(decode + parse, num_parallel_calls=AUTOTUNE)``,
    ``batch(drop_remainder=True)``, ``prefetch(AUTOTUNE)``. The train parser: the JPEG's
    shape from its header, a random crop of 8-100 % of the area and 3/4-4/3 aspect
    (``sample_distorted_bounding_box``, then ``decode_and_crop_jpeg``; a center crop where the
    draw failed), a random horizontal flip, resize to 224 px, normalise by the ImageNet mean
    and deviation. Model Garden is tuned already: the expert fix is the same pipeline."""
    del expert
    keys = {"image/encoded": tf.io.FixedLenFeature((), tf.string, default_value=""),
            "image/class/label": tf.io.FixedLenFeature((), tf.int64, default_value=-1)}

    def center_crop_v2(image_bytes, image_shape, fraction=0.875):
        crop_size = tf.cast(tf.cast(tf.minimum(image_shape[0], image_shape[1]), tf.float32)
                            * fraction, tf.int32)
        offset_y = (image_shape[0] - crop_size + 1) // 2
        offset_x = (image_shape[1] - crop_size + 1) // 2
        return tf.image.decode_and_crop_jpeg(
            image_bytes, tf.stack([offset_y, offset_x, crop_size, crop_size]), channels=3)

    def random_crop_v2(image_bytes, image_shape):
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            image_shape, bounding_boxes=tf.constant([0.0, 0.0, 1.0, 1.0], shape=[1, 1, 4]),
            min_object_covered=0.1, aspect_ratio_range=(3 / 4, 4 / 3), area_range=(0.08, 1.0),
            max_attempts=10, use_image_if_no_bounding_boxes=True)
        offset_y, offset_x, _ = tf.unstack(begin)
        target_height, target_width, _ = tf.unstack(size)
        window = tf.stack([offset_y, offset_x, target_height, target_width])
        return tf.image.decode_and_crop_jpeg(image_bytes, window, channels=3)

    def parse(serialized):
        decoded = tf.io.parse_single_example(serialized, keys)
        image_bytes = decoded["image/encoded"]
        image_shape = tf.image.extract_jpeg_shape(image_bytes)
        cropped = random_crop_v2(image_bytes, image_shape)
        image = tf.cond(tf.reduce_all(tf.equal(tf.shape(cropped), image_shape)),
                        lambda: center_crop_v2(image_bytes, image_shape), lambda: cropped)
        image = tf.image.random_flip_left_right(image)
        image = tf.image.resize(image, [224, 224], method="bilinear")
        image.set_shape([224, 224, 3])
        image = (image - tf.constant(MEAN_RGB)) / tf.constant(STDDEV_RGB)
        image = tf.image.convert_image_dtype(image, tf.float32)
        return image, tf.cast(decoded["image/class/label"], tf.int32)

    files = tf.data.Dataset.from_tensor_slices(list(data.shards)).shuffle(len(data.shards))
    dataset = files.interleave(tf.data.TFRecordDataset, cycle_length=4,
                               num_parallel_calls=AUTOTUNE)
    dataset = dataset.shuffle(64).map(parse, num_parallel_calls=AUTOTUNE)
    return dataset.batch(8, drop_remainder=True).prefetch(AUTOTUNE)


def _factory(build, expert):
    return lambda data: build(data, expert)


def _pipeline(name, build, verdict, **flags) -> Pipeline:
    return Pipeline(name, _factory(build, False), _factory(build, True), verdict, **flags)


NO_CACHE = frozenset({"cache"})  # a cache is written already, or would sit above a random stage

PIPELINES = (
    _pipeline("tf images tutorial: tf.data for finer control", _image_guide,
              # its first shuffle draws one order for every pass: a cache after it is valid
              Verdict("Map", "DecodeJpeg", never=NO_CACHE | {"cache_after_random",
                                                            "parallelize"}), seconds=6.0),
    _pipeline("tf.data guide: scalar mapping", _vectorizing_guide,
              # nothing random: caching the batches is valid too
              Verdict("Map", recommends=frozenset({"vectorize"}),
                      never=frozenset({"parallelize"})), ordered=True),
    _pipeline("keras: image classification from scratch", _classification_from_scratch,
              # decoding a 240x320 JPEG and rotating a 180x180 image cost within 3x of each
              # other: which is slower depends on the CPU (its vector units) and its load
              Verdict("Map", ("ImageProjectiveTransformV3", "DecodeImage"),
                      never=NO_CACHE | {"parallelize"}),
              augmented=True),
    _pipeline("keras: Oxford pets segmentation", _pets_segmentation,
              Verdict("Map", "DecodePng", recommends=frozenset({"cache"}),
                      never=frozenset({"parallelize"})), ordered=True),
    _pipeline("keras: 3D CT volumes", _ct_volumes,
              Verdict("Map", python=True, recommends=frozenset({"python"}),
                      never=NO_CACHE | {"parallelize"}), augmented=True),
    _pipeline("tf audio tutorial: STFT spectrograms", _simple_audio,
              # the tutorial caches after audio_dataset_from_directory's file shuffle
              Verdict("Map", recommends=frozenset({"cache_after_random"}),
                      never=NO_CACHE | {"parallelize"})),
    _pipeline("keras: text classification from scratch", _text_from_scratch,
              Verdict("Map", recommends=frozenset({"cache_after_random"}), never=NO_CACHE)),
    _pipeline("keras: English-Spanish translation", _translation,
              Verdict("Map", never=NO_CACHE | {"cache_after_random"})),
    _pipeline("Model Garden: classification_input", _model_garden,
              Verdict("Map", "DecodeAndCropJpeg", never=NO_CACHE | {"parallelize"}),
              augmented=True),
)
