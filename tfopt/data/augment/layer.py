"""The :class:`Augment` Keras layer: augmentation as the first layer of a model.

Raises:
    InvalidArgumentError: An invalid option, or MixUp/CutMix asked of the layer.

Example:
    >>> inputs = keras.Input((256, 256, 3), dtype="uint8")
    >>> x = Augment(output_size=224, random_crop=True, brightness=0.2, seed=0)(inputs)
"""

from __future__ import annotations

import dataclasses

import keras
import tensorflow as tf

from tfopt._validate import known_options, optional_whole_number
from tfopt.data.augment.config import FIELD_NAMES, AugmentConfig, make_config
from tfopt.data.augment.functional import augment_images, default_dtype
from tfopt.data.augment.seeds import as_seed, fold_in
from tfopt.errors import InvalidArgumentError

# The entry of the seed generator's state in a saved model or weights file.
_SEED_STATE_KEY = "seed_generator_state"

# Keyword arguments keras.layers.Layer itself takes (anything else is a config field or a typo).
_LAYER_KWARGS = frozenset({"name", "dtype", "trainable", "autocast", "activity_regularizer",
                           "input_shape", "batch_input_shape", "batch_size", "input_dim"})


@keras.saving.register_keras_serializable(package="tfopt")
class Augment(keras.layers.Layer):
    """Augmentation as the first layer of a model, so it runs on the accelerator.

    With ``training=True`` (``model.fit`` passes it) the layer runs every op of its
    :class:`AugmentConfig` with a fresh seed per call from a ``keras.random.SeedGenerator``
    started at ``seed`` (folded with the replica id under a distribution strategy, so replicas
    differ); two models built with the same seed augment identically. In inference it only
    resizes to ``output_size`` (largest central crop), normalises and casts. The output dtype
    is the layer's compute dtype (the mixed-precision policy's) unless ``output_dtype`` is set.
    Inputs are not autocast: uint8 and float32 batches arrive as they are, arithmetic is
    float32. All ops compile with XLA.

    MixUp and CutMix are refused: they change the labels, which a layer never sees. Apply them
    with :func:`augment_dataset` (or :func:`augment_batch` in ``dataset.map`` after batching).

    The layer saves with the model, and the position of its seed generator with it (in
    ``save_weights`` files and tfopt's backups too; Keras itself saves no generator state), so
    a model loaded or a training resumed continues the draws instead of repeating the first
    ones. Loading needs the class registered with Keras, which
    ``import tfopt`` alone does not do (it imports no TensorFlow): call
    ``tfopt.keras_objects()`` before ``keras.models.load_model`` (or pass it as
    ``custom_objects``).

    Args:
        config: The ops. Defaults to None (``AugmentConfig()`` updated by the keyword fields).
        seed: An int starting the seed generator. Defaults to None (a random start;
            reproducible only after ``keras.utils.set_random_seed``).
        **kwargs: :class:`AugmentConfig` fields, and ``keras.layers.Layer`` arguments
            (``name``, ``dtype``...).

    Raises:
        InvalidArgumentError: An invalid option, or MixUp/CutMix asked for.

    Example:
        >>> inputs = keras.Input((256, 256, 3), dtype="uint8")
        >>> x = Augment(output_size=224, random_crop=True, brightness=0.2, seed=0)(inputs)
        >>> x = keras.layers.Conv2D(32, 3)(x)
    """

    def __init__(self, config: AugmentConfig | None = None, *, seed: int | None = None,
                 **kwargs):
        fields = {key: kwargs.pop(key) for key in list(kwargs) if key in FIELD_NAMES}
        known_options(kwargs, (*FIELD_NAMES, *sorted(_LAYER_KWARGS)), "Augment")
        config = make_config(config, fields, "Augment")
        if config.mixes:
            raise InvalidArgumentError(
                f"mixup_alpha={config.mixup_alpha}, cutmix_alpha={config.cutmix_alpha}: a "
                "layer cannot mix labels it never sees; use augment_dataset(dataset, ...) or "
                "dataset.map(lambda x, y: augment_batch(x, y, ...)) after batching, with "
                "loss='categorical_crossentropy'")
        # numpy integers too, as plain ints: Keras's SeedGenerator wants int
        seed = optional_whole_number(seed, "seed", expected="an int or None")
        # we cast ourselves (float32 arithmetic, then the compute dtype); Keras's autocast would
        # round float32 inputs to float16 before we see them
        kwargs.setdefault("autocast", False)
        super().__init__(**kwargs)
        self.config = config
        self.seed = seed
        self._seed_generator = keras.random.SeedGenerator(seed)

    @property
    def output_dtype(self) -> str:
        return default_dtype(self.config, self.compute_dtype)

    def call(self, inputs, training=False):
        seed = None
        if training and self.config.is_random:
            seed = self._seed_generator.next()
            replica = tf.distribute.get_replica_context()
            if replica is not None and replica.num_replicas_in_sync > 1:
                seed = fold_in(as_seed(seed), replica.replica_id_in_sync_group)
        images, _ = augment_images(inputs, None, self.config, seed, bool(training),
                                   self.output_dtype)
        return images

    def compute_output_shape(self, input_shape):
        if len(input_shape) != 4:
            raise InvalidArgumentError(
                f"Augment {self.name!r}: expected a batch [batch, height, width, channels], got "
                f"input shape {tuple(input_shape)}; give keras.Input the shape of one image, "
                "e.g. keras.Input((224, 224, 3)), and feed batched images")
        batch, height, width, channels = input_shape
        if self.config.output_size is not None:
            height, width = self.config.output_size
        return batch, height, width, channels

    def compute_output_spec(self, inputs, training=False):
        # declared, not traced: tracing would advance the seed generator on symbolic inputs
        return keras.KerasTensor(self.compute_output_shape(inputs.shape),
                                 dtype=self.output_dtype)

    # Keras saves no SeedGenerator state (layer.weights leaves it out): a model saved or backed
    # up mid-training would restart its augmentation at the first call's seed, so a resumed
    # run would repeat the crops and flips of the run's start instead of continuing them.
    def save_own_variables(self, store):
        super().save_own_variables(store)  # nothing: the layer has no weights
        store[_SEED_STATE_KEY] = self._seed_generator.state

    def load_own_variables(self, store):
        # a file saved before the state was kept has no entry: the generator keeps its start
        if _SEED_STATE_KEY in store:
            self._seed_generator.state.assign(store[_SEED_STATE_KEY])

    def get_config(self):
        base = super().get_config()
        return {**base, "config": dataclasses.asdict(self.config), "seed": self.seed}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        fields = config.pop("config", None) or {}
        # JSON turned the tuples into lists; __post_init__ turns them back
        return cls(AugmentConfig(**fields), **config)
