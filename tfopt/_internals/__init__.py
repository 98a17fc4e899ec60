"""The one door to private Keras and TensorFlow names: each listed, pinned and checked.

tfopt reaches past the public Keras and TensorFlow APIs in a few places where they offer no
public way (resuming at an epoch, finding nested layers, the multi-worker and mirrored
accumulation fixes, a dataset's graph). Every such name is used only inside this package
(``tests/test_layering.py`` fails on one outside it) and listed in :data:`INTERNALS` with what
tfopt does with it and what a user loses without it; ``tests/test_internals.py`` resolves each
on the installed releases and compares callables' parameters, so a Keras or TensorFlow release
that removes or changes one fails there, by name, before it fails a user.

The modules beside this one hold the code that touches the names, one per owner:
``keras_model`` (layers, fit's initial epoch, metric direction, weights in memory),
``keras_optimizer`` (accumulation under mirrored strategies), ``keras_trainer`` (the
multi-worker fit fix), ``keras_data`` (the batches fit reads), ``tf_runtime`` (datasets,
strategies, kernels, the tf.data service).
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass

from tfopt.errors import TfoptError

logger = logging.getLogger("tfopt")

# Releases (major.minor) on which tests/test_internals.py and the tests of each fix pass: the
# newest (scripts/test.sh) and the floors setup.cfg declares (scripts/test_floor.sh).
TESTED_KERAS = ("3.14", "3.15")
TESTED_TENSORFLOW = ("2.21",)


class InternalsChangedError(TfoptError):
    """A private Keras or TensorFlow name tfopt needs is gone or changed in this release."""

    def __init__(self, name: str, problem: str):
        self.name = name
        self.problem = problem
        super().__init__(f"{name}: {problem} in {installed_releases()}; tfopt uses it as "
                         f"tested on {tested_releases()}. Hint: install a tested release.")


@dataclass(frozen=True)
class Internal:
    """One private name: where it lives, what tfopt needs it for, what is lost without it.

    ``resolve`` returns the object (a function, a class attribute, or an instance's attribute
    read from a small sample); ``parameters`` are a callable's parameter names as tested.
    """

    name: str
    used_for: str
    without_it: str
    resolve: Callable[[], object]
    parameters: tuple[str, ...] | None = None


def major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def installed_releases() -> str:
    import keras
    import tensorflow as tf

    return f"Keras {keras.__version__} / TensorFlow {tf.__version__}"


def tested_releases() -> str:
    return f"Keras {', '.join(TESTED_KERAS)} / TensorFlow {', '.join(TESTED_TENSORFLOW)}"


def attribute(owner, name: str, qualified: str):
    """``getattr(owner, name)``, or :class:`InternalsChangedError` naming ``qualified``."""
    try:
        return getattr(owner, name)
    except AttributeError:
        raise InternalsChangedError(qualified, "not found") from None


def module(path: str, qualified: str):
    """The private module ``path``, or :class:`InternalsChangedError` naming ``qualified``."""
    try:
        return importlib.import_module(path)
    except ImportError as error:
        raise InternalsChangedError(qualified, f"cannot be imported ({error})") from None


_WARNED: set[str] = set()


def warn_unavailable(name: str, without_it: str) -> None:
    """One warning per process that ``name`` is gone here and what the user loses."""
    if name in _WARNED:
        return
    _WARNED.add(name)
    logger.warning("%s is not in %s (tfopt is tested on %s): %s", name, installed_releases(),
                   tested_releases(), without_it)


def problem(internal: Internal) -> str | None:
    """Why ``internal`` does not hold on the installed releases, or None when it does."""
    try:
        found = internal.resolve()
    except InternalsChangedError as error:
        return error.problem
    except (AttributeError, ImportError, KeyError) as error:
        return f"not found ({type(error).__name__}: {error})"
    if internal.parameters is None:
        return None
    try:
        parameters = tuple(inspect.signature(found).parameters)
    except (TypeError, ValueError):
        return "no longer a callable with a signature"
    if parameters != internal.parameters:
        return (f"parameters changed: ({', '.join(parameters)}), tested with "
                f"({', '.join(internal.parameters)})")
    return None


def _name_in(path: str, *names: str):
    """A resolver of ``path`` (a module) then ``names`` (attributes, in turn)."""
    def resolve():
        target = module(path, f"{path}.{names[0]}")
        for name in names:
            target = attribute(target, name, f"{path}.{'.'.join(names)}")
        return target
    return resolve


def _sample_attribute(make: Callable[[], object], name: str):
    def resolve():
        sample = make()
        if name not in vars(sample):
            raise InternalsChangedError(f"{type(sample).__name__}.{name}",
                                        "no longer set on a new instance")
        return vars(sample)[name]
    return resolve


def _sample_model():
    import keras

    return keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])


def _sample_optimizer():
    import keras

    optimizer = keras.optimizers.SGD(gradient_accumulation_steps=2)
    optimizer.build(_sample_model().trainable_variables)
    return optimizer


def _sample_seed_generator():
    import keras

    return keras.random.SeedGenerator(1)


def _keras_tensor_history():
    import keras

    return attribute(keras.Input((2,)), "_keras_history", "KerasTensor._keras_history")


def _accuracy_direction():
    import keras

    return _sample_attribute(keras.metrics.SparseCategoricalAccuracy, "_direction")()


def _sample_dataset_variant():
    import tensorflow as tf

    return attribute(tf.data.Dataset.range(1), "_variant_tensor",
                     "tf.data.Dataset._variant_tensor")


_OPTIMIZER = "keras.src.optimizers.base_optimizer"
_TRAINER = "keras.src.backend.tensorflow.trainer"

INTERNALS: tuple[Internal, ...] = (
    Internal("keras.Layer._flatten_layers", "every layer of a model, nested ones included "
             "(fused and synchronized batch norm rewrite them)",
             "batch-norm rewrites cannot find layers", _name_in("keras", "Layer", "_flatten_layers"),
             ("self", "include_self", "recursive")),
    Internal("keras.Model._initial_epoch", "the epoch a restored backup resumes fit at (what "
             "keras.callbacks.BackupAndRestore sets)", "a resumed fit restarts at epoch 1",
             _sample_attribute(_sample_model, "_initial_epoch")),
    Internal("keras.Metric._direction", "whether a metric improves upward, for the best-model "
             "checkpoint's mode='auto' (Keras's own checkpoint reads it)",
             "mode='auto' needs mode='min' or 'max' for metrics other than losses",
             _accuracy_direction),
    Internal("keras.random.SeedGenerator.state", "the counters of the model's random layers "
             "(dropout, noise), kept in each backup beside the weights (save_weights leaves "
             "them out)", "a resumed fit draws other dropout masks than an uninterrupted one",
             _sample_attribute(_sample_seed_generator, "state")),
    Internal("KerasTensor._keras_history", "the layer behind each model output, named in the "
             "precision check", "outputs are named by index", _keras_tensor_history),
    Internal("keras.src.saving.saving_lib._save_state", "a model's weights file made in memory, "
             "each variable read as save_weights reads it (backups check the space first)",
             "backups cannot be written", _name_in("keras.src.saving.saving_lib", "_save_state"),
             ("saveable", "weights_store", "assets_store", "inner_path", "visited_saveables")),
    Internal("keras.src.saving.saving_lib.H5IOStore", "the weights file's writer over a buffer",
             "backups cannot be written", _name_in("keras.src.saving.saving_lib", "H5IOStore")),
    *(Internal(f"keras.optimizers.Optimizer.{name}", "gradient accumulation under Mirrored"
               "Strategy and MultiWorkerMirroredStrategy (Keras's own fails there)",
               "gradient accumulation fails under mirrored strategies",
               _name_in(_OPTIMIZER, "BaseOptimizer", name), parameters)
      for name, parameters in (
          ("_backend_apply_gradients", ("self", "grads", "trainable_variables")),
          ("_get_variable_index", ("self", "variable")),
          ("_clip_gradients", ("self", "grads")),
          ("_use_weight_decay", ("self", "variable")),
          ("_update_model_variables_moving_average", ("self", "trainable_variables")),
          ("_overwrite_model_variables_with_average_value", ("self", "trainable_variables")))),
    *(Internal(f"keras.optimizers.Optimizer.{name}", "gradient accumulation under mirrored "
               "strategies; the learning-rate schedule accumulation wraps",
               "gradient accumulation fails under mirrored strategies",
               _sample_attribute(_sample_optimizer, name))
      for name in ("_accumulated_gradients", "_iterations", "_trainable_variables",
                   "_learning_rate")),
    *(Internal(f"{_TRAINER}.{qualified}", "the multi-worker fit fix (keras-team/keras#20585)",
               "fit under MultiWorkerMirroredStrategy fails before its first step",
               _name_in(_TRAINER, *qualified.split(".")), parameters)
      for qualified, parameters in (
          ("TensorFlowTrainer._make_function", ("self", "step_function")),
          ("TensorFlowTrainer._maybe_symbolic_build", ("self", "iterator", "data_batch")),
          ("TensorFlowTrainer._symbolic_build", ("self", "iterator", "data_batch")),
          ("reduce_per_replica", ("values", "strategy", "reduction")),
          ("_collective_all_reduce_multi_worker", ("strategy",)))),
    Internal("keras.Model._distribute_strategy", "the multi-worker fix builds the model in the "
             "strategy's scope Keras recorded (None: Keras builds when it traces)",
             "fit under MultiWorkerMirroredStrategy fails before its first step",
             _sample_attribute(_sample_model, "_distribute_strategy")),
    Internal("keras.src.trainers.epoch_iterator.EpochIterator._get_iterator",
             "the multi-worker fix reads the element spec without drawing a batch",
             "a resumed multi-worker fit shuffles differently from an uninterrupted one",
             _name_in("keras.src.trainers.epoch_iterator", "EpochIterator", "_get_iterator"),
             ("self",)),
    Internal("keras.src.trainers.data_adapters.get_data_adapter", "tfopt profile reads the "
             "batches a script's fit reads (arrays, DataFrames, generators) to time its step "
             "apart from its input", "tfopt profile cannot split a step into input and compute",
             _name_in("keras.src.trainers.data_adapters", "get_data_adapter"),
             ("x", "y", "sample_weight", "batch_size", "steps_per_epoch", "shuffle",
              "class_weight")),
    Internal("tf.data.Dataset._variant_tensor", "tfopt.analyze serialises a dataset's graph",
             "tfopt.analyze and tfopt.optimize stop with an error", _sample_dataset_variant),
    Internal("tensorflow.python.framework.op_def_registry.get", "which dataset ops are "
             "stateful (analyze's rewrites keep those)", "tfopt.analyze stops with an error",
             _name_in("tensorflow.python.framework.op_def_registry", "get"), ("name",)),
    Internal("tensorflow.python.framework.config.is_op_determinism_enabled",
             "tfopt.Run's plan follows op determinism (TensorFlow exports only its setter)",
             "tfopt.Run assumes op determinism is off",
             _name_in("tensorflow.python.framework.config", "is_op_determinism_enabled"), ()),
    Internal("tensorflow.python.distribute.distribute_lib._DefaultDistributionStrategy",
             "telling the default strategy from a real one passed as input_context",
             "a pipeline given the default strategy plans as if a strategy were active",
             _name_in("tensorflow.python.distribute.distribute_lib",
                    "_DefaultDistributionStrategy")),
    Internal("tensorflow.python.distribute.values.PerReplicaSpec._value_specs",
             "one replica's element spec in the multi-worker fix",
             "the multi-worker fix reads a batch to build the model",
             _name_in("tensorflow.python.distribute.values", "PerReplicaSpec", "_value_specs")),
    Internal("tensorflow.python.framework.kernels.get_registered_kernels_for_op",
             "whether this TensorFlow build has NCCL's GPU kernels (TensorFlow's own choice "
             "reads the same registry)", "MirroredStrategy uses its default all-reduce",
             _name_in("tensorflow.python.framework.kernels", "get_registered_kernels_for_op"),
             ("name",)),
    Internal("tensorflow.python.eager.context.Context.configure_coordination_service",
             "under tfopt launch, the multi-worker strategy's coordination service waits "
             "longer for a busy worker's heartbeat (the launcher watches its workers itself)",
             "a worker starved of CPU for 10 s ends the whole job",
             _name_in("tensorflow.python.eager.context", "Context",
                      "configure_coordination_service"),
             ("self", "service_type", "service_leader", "enable_health_check",
              "cluster_register_timeout_in_ms", "heartbeat_timeout_in_ms",
              "shutdown_barrier_timeout_in_ms", "coordinated_jobs",
              "allow_new_incarnation_to_reconnect")),
    Internal("tensorflow.python.eager.context.Context.coordination_service",
             "whether the coordination service is configured already",
             "a worker starved of CPU for 10 s ends the whole job",
             _name_in("tensorflow.python.eager.context", "Context", "coordination_service")),
    Internal("tensorflow.python.distribute.multi_worker_util.coordination_leader",
             "the coordination service's leader, as the multi-worker strategy names it",
             "a worker starved of CPU for 10 s ends the whole job",
             _name_in("tensorflow.python.distribute.multi_worker_util", "coordination_leader"),
             ("cluster_spec",)),
    Internal("tensorflow.compiler.xla.tsl.protobuf.coordination_config_pb2.CoordinatedJob",
             "the jobs the coordination service coordinates",
             "a worker starved of CPU for 10 s ends the whole job",
             _name_in("tensorflow.compiler.xla.tsl.protobuf.coordination_config_pb2",
                      "CoordinatedJob")),
    Internal("tf.data.experimental.service.DispatchServer._stop", "stopping a dispatcher the "
             "benchmark and the tests started (the public API has no stop)",
             "tfopt data-service servers stop only with their process",
             _name_in("tensorflow", "data", "experimental", "service", "DispatchServer", "_stop"),
             ("self",)),
    Internal("tf.data.experimental.service.WorkerServer._stop", "stopping a worker server",
             "tfopt data-service servers stop only with their process",
             _name_in("tensorflow", "data", "experimental", "service", "WorkerServer", "_stop"),
             ("self",)),
    Internal("tf.data.experimental.service.WorkerServer._address", "the port a worker "
             "started on port 0 was given", "a worker must be given its port",
             _name_in("tensorflow", "data", "experimental", "service", "WorkerServer",
                    "_address")),
)


def changed() -> list[str]:
    """'name: problem' for each listed name that does not hold on the installed releases."""
    return [f"{internal.name}: {found}" for internal in INTERNALS
            if (found := problem(internal)) is not None]
