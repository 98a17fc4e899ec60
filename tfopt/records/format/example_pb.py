"""``tf.train.Example`` and its parts as protobuf message classes, without TensorFlow.

The classes are built at first use from the public schema (TensorFlow's
``tensorflow/core/example/feature.proto`` and ``example.proto``: package ``tensorflow``, the
same messages, field numbers and types), in a descriptor pool of their own, so that they never
clash with TensorFlow's generated classes when both are loaded. They parse and serialize the
same bytes as ``tf.train.Example``; importing ``tensorflow.core.example`` instead would import
all of TensorFlow.

Example:
    >>> Example = example_classes().Example
    >>> example = Example()
    >>> example.features.feature["label"].int64_list.value.append(3)
    >>> Example.FromString(example.SerializeToString(deterministic=True)) == example
    True
"""

from __future__ import annotations

import functools
import types

_PACKAGE = "tensorflow"


@functools.lru_cache(maxsize=1)
def example_classes() -> types.SimpleNamespace:
    """The message classes: ``Example``, ``SequenceExample``, ``Features``, ``Feature``,
    ``FeatureList``, ``FeatureLists``, ``BytesList``, ``FloatList``, ``Int64List``."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    optional, repeated = F.LABEL_OPTIONAL, F.LABEL_REPEATED

    def message(file, name, fields, nested=(), oneofs=()):
        proto = file.message_type.add(name=name)
        for oneof in oneofs:
            proto.oneof_decl.add(name=oneof)
        for field in fields:
            proto.field.add(**field)
        for entry in nested:
            proto.nested_type.append(entry)
        return proto

    def field(name, number, kind, label=optional, type_name=None, oneof=None, packed=None,
              options=None):
        spec = {"name": name, "number": number, "type": kind, "label": label}
        if type_name:
            spec["type_name"] = f".{_PACKAGE}.{type_name}"
        if oneof is not None:
            spec["oneof_index"] = oneof
        if packed is not None:
            spec["options"] = descriptor_pb2.FieldOptions(packed=packed, **(options or {}))
        return spec

    def map_entry(name, value_type):
        entry = descriptor_pb2.DescriptorProto(name=name)
        entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=optional)
        entry.field.add(name="value", number=2, type=F.TYPE_MESSAGE, label=optional,
                        type_name=f".{_PACKAGE}.{value_type}")
        entry.options.map_entry = True
        return entry

    feature = descriptor_pb2.FileDescriptorProto(
        name="tensorflow/core/example/feature.proto", package=_PACKAGE, syntax="proto3")
    message(feature, "BytesList", [field("value", 1, F.TYPE_BYTES, repeated)])
    message(feature, "FloatList", [field("value", 1, F.TYPE_FLOAT, repeated, packed=True)])
    message(feature, "Int64List", [field("value", 1, F.TYPE_INT64, repeated, packed=True,
                                             options={"jstype": descriptor_pb2.FieldOptions.JS_STRING})])
    message(feature, "Feature", [
        field("bytes_list", 1, F.TYPE_MESSAGE, type_name="BytesList", oneof=0),
        field("float_list", 2, F.TYPE_MESSAGE, type_name="FloatList", oneof=0),
        field("int64_list", 3, F.TYPE_MESSAGE, type_name="Int64List", oneof=0),
    ], oneofs=["kind"])
    message(feature, "Features", [
        field("feature", 1, F.TYPE_MESSAGE, repeated, type_name="Features.FeatureEntry")],
        nested=[map_entry("FeatureEntry", "Feature")])
    message(feature, "FeatureList", [
        field("feature", 1, F.TYPE_MESSAGE, repeated, type_name="Feature")])
    message(feature, "FeatureLists", [
        field("feature_list", 1, F.TYPE_MESSAGE, repeated,
              type_name="FeatureLists.FeatureListEntry")],
        nested=[map_entry("FeatureListEntry", "FeatureList")])

    example = descriptor_pb2.FileDescriptorProto(
        name="tensorflow/core/example/example.proto", package=_PACKAGE, syntax="proto3",
        dependency=["tensorflow/core/example/feature.proto"])
    message(example, "Example", [field("features", 1, F.TYPE_MESSAGE, type_name="Features")])
    message(example, "SequenceExample", [
        field("context", 1, F.TYPE_MESSAGE, type_name="Features"),
        field("feature_lists", 2, F.TYPE_MESSAGE, type_name="FeatureLists")])

    # a pool of their own: TensorFlow's generated classes register these file names in the
    # default pool, and two different registrations of one name would clash
    pool = descriptor_pool.DescriptorPool()
    pool.Add(feature)
    pool.Add(example)
    names = ["BytesList", "FloatList", "Int64List", "Feature", "Features", "FeatureList",
             "FeatureLists", "Example", "SequenceExample"]
    # GetMessageClass is protobuf >= 4.22's; MessageFactory.GetPrototype the older one's
    get_class = getattr(message_factory, "GetMessageClass", None) or \
        message_factory.MessageFactory(pool).GetPrototype
    return types.SimpleNamespace(**{
        name: get_class(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}")) for name in names})

