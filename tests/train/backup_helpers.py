"""What the backup tests share: a tiny model and data, a fit of 4 epochs of 4 batches, and a
callback that records the epochs run and can stop a fit at the start of one."""

from __future__ import annotations

import keras
import numpy as np


def tiny_model():
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("adam", "mse")
    return model


def tiny_data():
    rng = np.random.default_rng(0)
    return rng.random((64, 4), dtype=np.float32), rng.random((64, 1), dtype=np.float32)


class Interrupt(Exception):
    pass


class Recorder(keras.callbacks.Callback):
    """Records the epochs run; raises ``Interrupt`` at the start of epoch ``stop_at``."""

    def __init__(self, stop_at=None):
        super().__init__()
        self.epochs, self.stop_at = [], stop_at

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.stop_at:
            raise Interrupt(f"stopped at epoch {epoch}")
        self.epochs.append(epoch)


def train(callbacks, epochs=4, model=None):
    """4 epochs of 4 batches, no shuffling: the same weights every time in one process."""
    x, y = tiny_data()
    model = model if model is not None else tiny_model()
    model.fit(x, y, batch_size=16, epochs=epochs, shuffle=False, verbose=0,
              callbacks=callbacks)
    return model


def assert_same_weights(got, want):
    for a, b in zip(got.get_weights(), want.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
