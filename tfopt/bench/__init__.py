"""Benchmarks that put tfopt beside the plain TensorFlow way in one run."""

# build_model's floor for image_size: its CNN halves the image four times. Here, free of
# TensorFlow, so that the CLI checks --image-size before it loads anything.
MIN_MODEL_IMAGE_SIZE = 16
