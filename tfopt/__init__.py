"""tfopt: make TensorFlow/Keras training use the hardware it runs on.

The public API is this flat namespace. Names resolve on first use (PEP 562), so
``import tfopt`` stays cheap and works where TensorFlow is not installed; TensorFlow is imported
only by the functions that need it.

Example:
    >>> import tfopt
    >>> result = tfopt.convert("photos/", "shards/", val_fraction=0.1)
    >>> tfopt.verify("shards/").ok
    True
"""

from __future__ import annotations

import importlib

from tfopt._version import __version__
from tfopt.errors import (
    DatasetError,
    DiskFullError,
    GpuUnavailableError,
    InvalidArgumentError,
    OutputExistsError,
    SourceError,
    TfoptError,
    UnsupportedDatasetError,
)

# Public name -> module that defines it. Resolved lazily by __getattr__ below.
_LAZY_EXPORTS = {
    # records: the on-disk format
    "convert": "tfopt.records.convert",
    "ConvertOptions": "tfopt.records.convert.options",
    "ConvertResult": "tfopt.records.convert.options",
    "inspect": "tfopt.records.inspect",
    "InspectResult": "tfopt.records.inspect",
    "FeatureInfo": "tfopt.records.format.schema_sample",
    "verify": "tfopt.records.verify",
    "VerifyResult": "tfopt.records.verify",
    "Manifest": "tfopt.records.manifest",
    "read_manifest": "tfopt.records.manifest",
    "make_demo_data": "tfopt.records.demo_data",
    # data: tf.data pipelines and on-device augmentation (import TensorFlow on first use)
    "PipelineBuilder": "tfopt.data.pipeline",
    "PipelineConfig": "tfopt.data.config",
    "PipelineChoices": "tfopt.data.choices",
    "build_pipeline": "tfopt.data.pipeline",
    "AugmentConfig": "tfopt.data.augment.config",
    "Augment": "tfopt.data.augment.layer",
    "augment_batch": "tfopt.data.augment.functional",
    "augment_dataset": "tfopt.data.augment.functional",
    "sample_crop_boxes": "tfopt.data.augment.functional",
    "start_dispatcher": "tfopt.data.service",
    "start_worker": "tfopt.data.service",
    # analysis: any tf.data pipeline's stages, bottleneck and fixes
    "analyze": "tfopt.analysis.analyze",
    "PipelineReport": "tfopt.analysis.report",
    "optimize": "tfopt.analysis.optimize",
    "optimize_with_report": "tfopt.analysis.optimize",
    "Optimization": "tfopt.analysis.optimize",
    # train: precision policy and gradient accumulation
    "choose_policy": "tfopt.train.precision",
    "PolicyChoice": "tfopt.train.precision",
    "enable_policy": "tfopt.train.precision",
    "check_model_precision": "tfopt.train.precision",
    "measure_policies": "tfopt.train.precision",
    "configure_accumulation": "tfopt.train.accumulation",
    "AccumulationPlan": "tfopt.train.accumulation",
    "make_optimizer": "tfopt.train.accumulation",
    "UpdateStepSchedule": "tfopt.train.accumulation",
    "keras_objects": "tfopt.train.saving",  # for keras.models.load_model
    # tune: settings by experiment
    "find_batch_size": "tfopt.tune.search",
    "throughput_sweep": "tfopt.tune.sweep",
    "BatchSizeResult": "tfopt.tune.results",
    "SweepResult": "tfopt.tune.results",
    # train: callbacks and backups
    "ThroughputCallback": "tfopt.train.callbacks",
    "InputStallCallback": "tfopt.train.callbacks",
    "GpuStatsCallback": "tfopt.train.callbacks",
    "InputProbe": "tfopt.train.callbacks",
    "training_callbacks": "tfopt.train.callbacks",
    "backup_callbacks": "tfopt.train.backup",
    "AtomicBackupAndRestore": "tfopt.train.backup",
    "BestModelCheckpoint": "tfopt.train.backup",
    "fuse_batch_norm": "tfopt.train.fused_batch_norm",
    "synchronize_batch_norm": "tfopt.train.sync_batch_norm",
    # distribute: strategy, cluster configuration, launcher, Keras multi-worker fix
    "select_strategy": "tfopt.distribute.strategy",
    "plan_strategy": "tfopt.distribute.strategy",
    "StrategyPlan": "tfopt.distribute.strategy",
    "fix_keras_multi_worker": "tfopt.distribute.keras_multi_worker",
    "cluster_info": "tfopt.distribute.cluster",
    "ClusterInfo": "tfopt.distribute.cluster",
    "cluster_tf_configs": "tfopt.distribute.cluster",
    "launch_workers": "tfopt.distribute.launch",
    # bench
    "BenchSettings": "tfopt.bench.pipeline",
    "run_pipeline_bench": "tfopt.bench.pipeline",
    "TrainBenchSettings": "tfopt.bench.train",
    "TrainBenchReport": "tfopt.bench.train",
    "run_train_bench": "tfopt.bench.train",
    # built-in models
    "build_model": "tfopt.models",
    # gpu: NVML and the environment doctor (work without TensorFlow)
    "run_doctor": "tfopt.gpu.doctor",
    "DoctorReport": "tfopt.gpu.doctor",
    "Check": "tfopt.gpu.doctor",
    "CheckStatus": "tfopt.gpu.doctor",
    "gpu_snapshots": "tfopt.gpu.nvml",
    "nvml_state": "tfopt.gpu.nvml",
    "NvmlState": "tfopt.gpu.nvml",
    "NvmlStatus": "tfopt.gpu.nvml",
    "GpuSnapshot": "tfopt.gpu.snapshot",
    "GpuSampler": "tfopt.gpu.sampler",
    "gather_facts": "tfopt.gpu.hardware",
    "HardwareFacts": "tfopt.gpu.hardware",
    "cpu_features": "tfopt.gpu.hardware",
}

__all__ = [
    "__version__",
    "TfoptError",
    "InvalidArgumentError",
    "SourceError",
    "DatasetError",
    "OutputExistsError",
    "DiskFullError",
    "GpuUnavailableError",
    "UnsupportedDatasetError",
    *_LAZY_EXPORTS,
]


def __getattr__(name: str):
    module_name = _LAZY_EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'tfopt' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__():
    return sorted(__all__)
