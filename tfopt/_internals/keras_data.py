"""Private Keras names about what ``fit`` reads (listed in ``INTERNALS``)."""

from __future__ import annotations

from tfopt._internals import attribute, module

_ADAPTERS = "keras.src.trainers.data_adapters"


def fit_dataset(x, y=None, sample_weight=None, batch_size=None, steps_per_epoch=None,
                class_weight=None):
    """The ``tf.data.Dataset`` of batches ``fit`` reads for these arguments, unshuffled.

    Keras turns arrays, DataFrames, generators and ``PyDataset`` objects into batches with its
    data adapters (a ``tf.data.Dataset`` is read as given); the adapters are private, and
    measuring what a script's ``fit`` reads needs the same batches, not a copy of the rules.
    """
    adapters = module(_ADAPTERS, f"{_ADAPTERS}.get_data_adapter")
    get_data_adapter = attribute(adapters, "get_data_adapter", f"{_ADAPTERS}.get_data_adapter")
    adapter = get_data_adapter(x, y=y, sample_weight=sample_weight, batch_size=batch_size,
                               steps_per_epoch=steps_per_epoch, shuffle=False,
                               class_weight=class_weight)
    return adapter.get_tf_dataset()
