"""tf.data pipelines from TFRecord shards: config, planner, sources, decoding, augmentation,
the tf.data service. How they fit: ``docs/data.md``."""
