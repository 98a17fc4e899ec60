"""Batched image augmentation that runs where the model runs.

The pipeline yields fixed-size uint8 batches; turning them into float, cropping, flipping,
colour jitter, normalisation and MixUp/CutMix happen here, on whole batches, with every random
decision drawn statelessly from one seed. Modules:

- :mod:`~tfopt.data.augment.config`: :class:`AugmentConfig`, what to do (no TensorFlow).
- :mod:`~tfopt.data.augment.seeds`: seeds and independent random streams.
- :mod:`~tfopt.data.augment.ops`: crops, flips and colour ops on batches.
- :mod:`~tfopt.data.augment.mixing`: MixUp and CutMix, images and labels.
- :mod:`~tfopt.data.augment.layer`: the :class:`Augment` Keras layer (on the accelerator).
- :mod:`~tfopt.data.augment.functional`: ``augment_batch``, ``augment_dataset``,
  ``sample_crop_boxes``.

The public names are re-exported by ``tfopt`` itself (``tfopt.Augment``). Design notes (XLA,
stateless randomness) are in ``docs/data.md``.
"""
