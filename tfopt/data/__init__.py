"""tf.data pipelines from TFRecord shards: sources, decoding strategies, augmentation."""
