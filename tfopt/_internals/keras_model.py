"""Private Keras names about models, layers, metrics and weights (listed in ``INTERNALS``)."""

from __future__ import annotations

import io

from tfopt._internals import InternalsChangedError, attribute, module


def all_layers(model) -> list:
    """Every layer inside ``model``, nested models' and custom layers' included, itself not.

    ``model.layers`` lists only the direct children; Keras's own recursive walk is private.
    """
    flatten = attribute(model, "_flatten_layers", "keras.Layer._flatten_layers")
    return list(flatten(include_self=False, recursive=True))


def seed_states(model) -> list:
    """The state variables of the random layers' seed generators (dropout, noise), in layer
    order: ``save_weights`` leaves them out, so a restored model would draw its first masks
    again. Each is a (seed, counter) pair."""
    import keras

    states = []
    for layer in all_layers(model):
        for value in vars(layer).values():
            if isinstance(value, keras.random.SeedGenerator):
                states.append(attribute(value, "state", "keras.random.SeedGenerator.state"))
    return states


def initial_epoch(model) -> int:
    """The epoch ``fit`` starts at after a restore (0 when nothing was restored)."""
    return int(getattr(model, "_initial_epoch", 0) or 0)


def set_initial_epoch(model, epoch: int) -> None:
    """Make the running ``fit`` start at ``epoch``, as ``keras.callbacks.BackupAndRestore`` does.

    Keras's fit reads the attribute after the callbacks' ``on_train_begin``; it has no public
    setter. Checked on the model first, so a release without it fails here, by name.
    """
    if "_initial_epoch" not in vars(model):
        raise InternalsChangedError("keras.Model._initial_epoch", "not set on this model")
    model._initial_epoch = int(epoch)


def metric_direction(model, name: str) -> str | None:
    """"up" or "down" for the compiled metric called ``name``, or None when none says."""
    found = []
    for metric in getattr(model, "metrics", None) or []:
        inner = getattr(metric, "metrics", None)  # Keras's compile containers hold the rest
        found.extend(inner if isinstance(inner, list) else [metric])
    for metric in found:
        if getattr(metric, "name", None) == name and getattr(metric, "_direction", None):
            return metric._direction
    return None


def keras_history_layer(tensor) -> str | None:
    """The name of the layer that produced a symbolic Keras tensor, or None."""
    history = getattr(tensor, "_keras_history", None)
    return history.operation.name if history else None


def weights_file_bytes(model) -> bytes:
    """The bytes ``model.save_weights("x.weights.h5")`` would write, made in memory.

    Keras's saver over a buffer: every variable is read as ``save_weights`` reads it, so a
    worker's part in collective reads is the same.
    """
    saving_lib = module("keras.src.saving.saving_lib", "keras.src.saving.saving_lib._save_state")
    save_state = attribute(saving_lib, "_save_state", "keras.src.saving.saving_lib._save_state")
    store_class = attribute(saving_lib, "H5IOStore", "keras.src.saving.saving_lib.H5IOStore")
    buffer = io.BytesIO()
    store = store_class(buffer, mode="w")
    try:
        save_state(model, weights_store=store, assets_store=None, inner_path="",
                   visited_saveables=set())
    finally:
        store.close()
    return buffer.getvalue()
