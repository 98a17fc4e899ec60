"""Benchmarks that put tfopt beside the plain TensorFlow way in one run."""
