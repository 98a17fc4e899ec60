"""Distribution: cluster configuration, strategy selection, the local launcher, and the Keras 3
multi-worker fix. ``cluster`` and ``launch`` import no TensorFlow."""
