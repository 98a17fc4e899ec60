"""tfopt: make TensorFlow/Keras training use the hardware it runs on.

The public API is this flat namespace: the few names a Keras user needs, listed in
``__all__``. Everything else is imported from the module that defines it, e.g.
``from tfopt.gpu.doctor import run_doctor`` or ``from tfopt.errors import DatasetError``.

Names resolve on first use (PEP 562), so ``import tfopt`` stays cheap and works where
TensorFlow is not installed; TensorFlow is imported only by the functions that need it.

Example:
    >>> import tfopt
    >>> result = tfopt.convert("photos/", "shards/", val_fraction=0.1)
    >>> tfopt.verify("shards/").ok
    True
"""

from __future__ import annotations

import importlib

from tfopt._version import __version__
from tfopt.errors import TfoptError

# Public name -> module that defines it. Resolved lazily by __getattr__ below.
_LAZY_EXPORTS = {
    # the whole training setup in one object
    "Run": "tfopt.run",
    # records: the on-disk format
    "convert": "tfopt.records.convert",
    "verify": "tfopt.records.verify",
    "inspect": "tfopt.records.inspect",
    "read_manifest": "tfopt.records.manifest",
    "make_demo_data": "tfopt.records.demo_data",
    # data: tf.data pipelines and on-device augmentation
    "PipelineBuilder": "tfopt.data.pipeline",
    "build_pipeline": "tfopt.data.pipeline",
    "Augment": "tfopt.data.augment.layer",
    # analysis: any tf.data pipeline's bottleneck, and its safe rewrites
    "analyze": "tfopt.analysis.analyze",
    "optimize": "tfopt.analysis.optimize",
    # train: precision, gradient accumulation, callbacks, backups, batch norm, saving
    "choose_policy": "tfopt.train.precision",
    "enable_policy": "tfopt.train.precision",
    "make_optimizer": "tfopt.train.accumulation",
    "training_callbacks": "tfopt.train.callbacks",
    "InputProbe": "tfopt.train.callbacks",
    "backup_callbacks": "tfopt.train.backup",
    "fuse_batch_norm": "tfopt.train.fused_batch_norm",
    "keras_objects": "tfopt.train.saving",  # for keras.models.load_model
    "model_flops": "tfopt.train.flops",
    # distribute and tune
    "select_strategy": "tfopt.distribute.strategy",
    "launch_workers": "tfopt.distribute.launch",
    "find_batch_size": "tfopt.tune.search",
}

__all__ = ["__version__", "TfoptError", *_LAZY_EXPORTS]


def __getattr__(name: str):
    module_name = _LAZY_EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'tfopt' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__():
    return sorted(__all__)
