"""Audio: TensorFlow's "Simple audio recognition: Recognizing keywords" tutorial.

Source: https://www.tensorflow.org/tutorials/audio/simple_audio
(https://github.com/tensorflow/docs/blob/master/site/en/tutorials/audio/simple_audio.ipynb).

As the tutorial: a folder of 16 kHz mono WAV files, one sub-folder per command (the
mini Speech Commands layout), read by ``keras.utils.audio_dataset_from_directory`` (batches of
64, ``validation_split=0.2``, seed 0, ``output_sequence_length=16000``, ``subset="both"``);
the channel axis squeezed; the validation part sharded in two (one half the test set, the other
the validation set); each waveform turned into the magnitude of its STFT (frame 255, step 128)
with a channel axis; ``cache().shuffle(10000).prefetch(AUTOTUNE)`` for training and
``cache().prefetch(AUTOTUNE)`` for validation; the model: Resizing(32, 32), a
``Normalization`` adapted on the training spectrograms, Conv2D(32, 3), Conv2D(64, 3), max
pooling, Dropout(0.25), Flatten, Dense(128), Dropout(0.5), Dense(8) logits; Adam, sparse
categorical cross-entropy from logits, accuracy; ``model.fit(train_spectrogram_ds,
validation_data=val_spectrogram_ds, epochs=10, callbacks=EarlyStopping(patience=2))``.

Data: eight "commands" made locally instead of recorded words, named as the tutorial's: each a
sequence of two or three tones (the class's own pitches and rhythm, each clip's pitch, timing,
loudness and length jittered) with harmonics, in loud noise, 0.6-1 s long (shorter clips
are padded by the loader, as real recordings are).

Scaled: 800 clips instead of 8,000 (``scale`` multiplies); the model and epochs are the
tutorial's.
"""

from __future__ import annotations

import io
import wave

import keras
import numpy as np
import tensorflow as tf

from tfopt.bench.workloads._base import Data, Workload, fresh_folder, majority_share, scaled_count

NAME = "simple_audio"
RATE = 16000
BATCH = 64
SPLIT_SEED = 0
LABELS = ("down", "go", "left", "no", "right", "stop", "up", "yes")


def wav_bytes(samples: np.ndarray) -> bytes:
    """16-bit mono PCM WAV at 16 kHz."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(RATE)
        handle.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())
    return buffer.getvalue()


def draw_clip(rng: np.random.Generator, pattern: np.ndarray) -> np.ndarray:
    """One clip: the class's tones (rows of start share, length share, Hz), jittered."""
    length = int(rng.uniform(0.6, 1.0) * RATE)
    t = np.arange(length) / RATE
    clip = np.zeros(length)
    pitch = rng.uniform(0.85, 1.15)
    for start, duration, hertz in pattern:
        begin = (start + rng.normal(0, 0.06)) * length
        end = begin + duration * length * rng.uniform(0.85, 1.15)
        envelope = np.clip(np.minimum(t * RATE - begin, end - t * RATE) / 400, 0, 1)
        tone = sum(np.sin(2 * np.pi * hertz * pitch * harmonic * t) / harmonic
                   for harmonic in (1, 2, 3))
        clip += envelope * tone
    clip *= rng.uniform(0.2, 0.6) / max(np.abs(clip).max(), 1e-6)
    return clip + rng.normal(0, 0.25, length)


def make_data(folder, seed: int, scale: float = 1.0) -> Data:
    """``folder/mini_speech_commands/<label>/<n>.wav``, the labels in turn."""
    rng = np.random.default_rng(seed)
    count = scaled_count(800, scale, 400)
    folder = fresh_folder(folder, NAME, seed, scale)
    patterns = []
    for _ in LABELS:  # two or three tones: (start share, length share, Hz)
        tones = int(rng.integers(2, 4))
        starts = np.sort(rng.uniform(0.05, 0.6, tones))
        patterns.append(np.stack([starts, rng.uniform(0.1, 0.3, tones),
                                  rng.uniform(200, 2400, tones)], axis=1))
    files = []
    for index in range(count):
        label = index % len(LABELS)
        path = folder / "mini_speech_commands" / LABELS[label] / f"{index:05d}.wav"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(wav_bytes(draw_clip(rng, patterns[label])))
        files.append(path)
    held_out = int(0.2 * count)  # audio_dataset_from_directory's validation part
    validation = _shard_count(held_out, index=1)
    return Data(NAME, folder, seed, scale, count - held_out, validation, files=files,
                info={"data_dir": folder / "mini_speech_commands"})


def _shard_count(examples: int, index: int) -> int:
    """Examples in shard ``index`` of 2 of the batched validation part (shards take batches)."""
    batches = -(-examples // BATCH)
    sizes = [BATCH] * (examples // BATCH) + ([examples % BATCH] if examples % BATCH else [])
    return sum(sizes[position] for position in range(index, batches, 2))


def _both(data: Data):
    return keras.utils.audio_dataset_from_directory(
        directory=str(data.info["data_dir"]), batch_size=BATCH, validation_split=0.2,
        seed=SPLIT_SEED, output_sequence_length=RATE, subset="both", verbose=False)


def squeeze(audio, labels):
    return tf.squeeze(audio, axis=-1), labels


def get_spectrogram(waveform):
    spectrogram = tf.signal.stft(waveform, frame_length=255, frame_step=128)
    spectrogram = tf.abs(spectrogram)
    return spectrogram[..., tf.newaxis]


def make_spec_ds(ds):
    return ds.map(map_func=lambda audio, label: (get_spectrogram(audio), label),
                  num_parallel_calls=tf.data.AUTOTUNE)


def inputs(data: Data) -> dict:
    """The tutorial's pipeline, up to the cached spectrogram datasets."""
    train_ds, val_ds = _both(data)
    train_ds = train_ds.map(squeeze, tf.data.AUTOTUNE)
    val_ds = val_ds.map(squeeze, tf.data.AUTOTUNE)
    val_ds = val_ds.shard(num_shards=2, index=1)  # shard 0 is the tutorial's test set
    train_spectrogram_ds = make_spec_ds(train_ds).cache().shuffle(10000).prefetch(
        tf.data.AUTOTUNE)
    val_spectrogram_ds = make_spec_ds(val_ds).cache().prefetch(tf.data.AUTOTUNE)
    return {"train": train_spectrogram_ds, "validation": val_spectrogram_ds}


def build_model(inputs: dict) -> keras.Model:
    """The tutorial's CNN, its ``Normalization`` adapted on the training spectrograms."""
    input_shape = inputs["train"].element_spec[0].shape[1:]
    norm_layer = keras.layers.Normalization()
    norm_layer.adapt(data=inputs["train"].map(map_func=lambda spec, label: spec))
    layers = keras.layers
    return keras.Sequential([
        layers.Input(shape=input_shape),
        layers.Resizing(32, 32),
        norm_layer,
        layers.Conv2D(32, 3, activation="relu"),
        layers.Conv2D(64, 3, activation="relu"),
        layers.MaxPooling2D(),
        layers.Dropout(0.25),
        layers.Flatten(),
        layers.Dense(128, activation="relu"),
        layers.Dropout(0.5),
        layers.Dense(len(LABELS)),
    ])


def compile_args() -> dict:
    return {"optimizer": keras.optimizers.Adam(),
            "loss": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            "metrics": ["accuracy"]}


def callbacks(_inputs) -> list:
    return [keras.callbacks.EarlyStopping(verbose=0, patience=2)]


def plain_fit(model, inputs: dict, epochs: int, verbose=0):
    return model.fit(inputs["train"], validation_data=inputs["validation"], epochs=epochs,
                     callbacks=callbacks(inputs), verbose=verbose)


def run_inputs(inputs: dict) -> dict:
    # the example adapts a Normalization layer on a dataset while it builds the model, which
    # Keras alone cannot do under a mixed policy: tfopt.Run's scope adapts it in float32
    return {"source": inputs["train"], "validation": inputs["validation"]}


def baseline(data: Data) -> float:
    _, val_ds = _both(data)
    labels = np.concatenate([y.numpy() for _, y in val_ds.shard(num_shards=2, index=1)])
    return majority_share(labels)


WORKLOAD = Workload(
    name=NAME, kind="audio",
    source=("https://www.tensorflow.org/tutorials/audio/simple_audio",
            "https://github.com/tensorflow/docs/blob/master/site/en/tutorials/audio/"
            "simple_audio.ipynb"),
    scaled="800 synthetic command clips instead of mini Speech Commands' 8,000",
    epochs=10, metric="val_accuracy", higher_is_better=True, make_data=make_data,
    inputs=inputs, build_model=build_model, compile_args=compile_args, plain_fit=plain_fit,
    run_inputs=run_inputs, baseline=baseline, callbacks=callbacks)
