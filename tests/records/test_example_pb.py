"""tf.train.Example without TensorFlow: the same schema as TensorFlow's, the same bytes."""

from __future__ import annotations

import pytest
from google.protobuf import descriptor_pb2

from tfopt.records.format.example_pb import example_classes

NAMES = ["BytesList", "FloatList", "Int64List", "Feature", "Features", "FeatureList",
         "FeatureLists", "Example", "SequenceExample"]


@pytest.mark.parametrize("name", NAMES)
def test_each_message_is_tensorflows(tf, name):
    mine, theirs = descriptor_pb2.DescriptorProto(), descriptor_pb2.DescriptorProto()
    getattr(example_classes(), name).DESCRIPTOR.CopyToProto(mine)
    getattr(tf.train, name).DESCRIPTOR.CopyToProto(theirs)
    assert mine == theirs
    assert getattr(example_classes(), name).DESCRIPTOR.full_name == f"tensorflow.{name}"


def test_the_same_bytes_both_ways(tf):
    example = example_classes().Example()
    feature = example.features.feature
    for key in ["zeta", "alpha", "image/encoded", "Beta", "é"]:
        feature[key].bytes_list.value.append(key.encode() * 3)
    feature["floats"].float_list.value.extend([0.5, -1e30, float("inf")])
    feature["ints"].int64_list.value.extend([0, -1, 1 << 62])
    feature["empty"].int64_list.SetInParent()
    raw = example.SerializeToString(deterministic=True)
    theirs = tf.train.Example.FromString(raw)
    assert theirs.SerializeToString(deterministic=True) == raw
    assert example_classes().Example.FromString(theirs.SerializeToString()) == example
    parsed = tf.io.parse_single_example(raw, {"ints": tf.io.VarLenFeature(tf.int64)})
    assert tf.sparse.to_dense(parsed["ints"]).numpy().tolist() == [0, -1, 1 << 62]
