"""A corpus of Keras training workloads reproduced from public keras.io and TensorFlow
examples, each on data it makes locally from a seed (nothing downloaded), for timing the
example's own ``model.fit`` beside the same model, data and epochs through :class:`tfopt.Run`
(``scripts/bench_workloads.py``).

Each module reproduces one example and cites it; :data:`WORKLOADS` holds them by name, in the
order of :data:`NAMES` (the benchmark's order). What a workload is made of: :class:`Workload`.
``NAMES`` imports nothing; ``WORKLOADS`` and the rest import TensorFlow and Keras on first use.

Example:
    >>> workload = WORKLOADS["mnist_convnet"]
    >>> data = workload.make_data("data/mnist", seed=0, scale=0.5)
    >>> inputs = workload.inputs(data)
    >>> model = workload.build_model(inputs)
    >>> workload.compile(model)
    >>> history = workload.plain_fit(model, inputs, workload.epochs)
    >>> history.history[workload.metric][-1], workload.baseline(data)
"""

from __future__ import annotations

import importlib

__all__ = ["NAMES", "WORKLOADS", "Data", "Workload", "count_examples", "run_counts"]

# one module of this package per workload, named as the workload
NAMES = ("mnist_convnet", "text_from_scratch", "structured_from_scratch", "feature_space",
         "weather_lstm", "image_folder", "pets_segmentation", "simple_audio", "transformer_text")
_FROM_BASE = ("Data", "Workload", "count_examples", "run_counts")


def __getattr__(name: str):
    if name == "WORKLOADS":
        workloads = {module: importlib.import_module(f"{__name__}.{module}").WORKLOAD
                     for module in NAMES}
        globals()["WORKLOADS"] = workloads
        return workloads
    if name in _FROM_BASE:
        return getattr(importlib.import_module(f"{__name__}._base"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
