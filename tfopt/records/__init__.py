"""The on-disk format: TFRecord shards, their manifest, the sources they are made from, and the
commands that convert, inspect and verify them. Imports no Keras."""
