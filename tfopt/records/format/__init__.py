"""The TFRecord format: its files (:mod:`.tfrecord`) and the schema their records hold
(:mod:`.schema_sample`)."""
