"""Training-step time of the built-in small ResNet with Keras's and with fused batch norm.

    python scripts/bench_batch_norm.py [--steps 30] [--rounds 3] [--batch-size 64]

For float32 and mixed_bfloat16, three models with the same weights: batch normalisation as
Keras 3 runs it, as ``tfopt.fuse_batch_norm`` runs it, and replaced by identities (what batch
norm costs at all). One process, one in-memory batch, rounds alternating between the six;
prints the median step time of each and the ratios.
"""

from __future__ import annotations

import argparse
import statistics
import time

from tfopt._tf import import_tensorflow

tf = import_tensorflow()
import keras  # noqa: E402

from tfopt import models  # noqa: E402
from tfopt.train.fused_batch_norm import fuse_batch_norm  # noqa: E402
from tfopt.train.precision import enable_policy  # noqa: E402

VARIANTS = ("keras", "fused", "none")


def build(policy: str, variant: str, image_size: int) -> keras.Model:
    keras.utils.set_random_seed(0)
    original = keras.layers.BatchNormalization  # what tfopt.models builds its layers from
    if variant == "none":  # the same network without batch norm: its whole cost
        keras.layers.BatchNormalization = lambda **kwargs: keras.layers.Identity()
    try:
        with enable_policy(policy):
            model = models.build_model("cnn", image_size=image_size, classes=10)
    finally:
        keras.layers.BatchNormalization = original
    if variant == "fused":
        fuse_batch_norm(model)
    model.compile(keras.optimizers.Adam(1e-3),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=models.DEFAULT_IMAGE_SIZE)
    args = parser.parse_args()
    images = tf.cast(tf.random.stateless_uniform(
        (args.batch_size, args.image_size, args.image_size, 3), (0, 1), maxval=256,
        dtype=tf.int32), tf.uint8)
    labels = tf.zeros((args.batch_size,), tf.int32)
    runs = {(policy, variant): build(policy, variant, args.image_size)
            for policy in ("float32", "mixed_bfloat16") for variant in VARIANTS}
    for model in runs.values():  # trace and warm up
        for _ in range(3):
            model.train_on_batch(images, labels)
    times: dict[tuple[str, str], list[float]] = {key: [] for key in runs}
    for _ in range(args.rounds):
        for key, model in runs.items():
            for _ in range(args.steps):
                started = time.perf_counter()
                model.train_on_batch(images, labels)
                times[key].append(time.perf_counter() - started)
    median = {key: statistics.median(values) * 1000 for key, values in times.items()}
    print(f"small ResNet, {args.image_size} px, batch {args.batch_size}: median training step "
          f"of {args.steps * args.rounds} per variant, {args.rounds} alternating rounds")
    for policy in ("float32", "mixed_bfloat16"):
        keras_ms, fused_ms, none_ms = (median[(policy, v)] for v in VARIANTS)
        print(f"{policy:15s} Keras BN {keras_ms:6.1f} ms  fused {fused_ms:6.1f} ms  "
              f"no BN {none_ms:6.1f} ms  |  fused/Keras speed {keras_ms / fused_ms:.2f}x, "
              f"BN share of Keras's step {(keras_ms - none_ms) / keras_ms:.0%}, "
              f"of the fused step {(fused_ms - none_ms) / fused_ms:.0%}")


if __name__ == "__main__":
    main()
