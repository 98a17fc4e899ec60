"""One test per private TensorFlow API tfopt.analyze uses (tfopt/analysis/tfapi.py), so that an
upgrade that breaks one fails here, by name."""

from __future__ import annotations

from analysis_helpers import tf

from tfopt.analysis import graph, measure, tfapi


def test_tensorflow_is_a_tested_release_and_has_every_api():
    tfapi.check_tensorflow()
    assert ".".join(tf.__version__.split(".")[:2]) in tfapi.TESTED_TENSORFLOW


def test_variant_tensor_and_dataset_to_graph_v2_serialise_a_pipeline():
    dataset = tf.data.Dataset.range(5, name="ids").map(lambda x: x * 2, name="double")
    assert tfapi.variant_tensor(dataset).dtype == tf.variant
    graph_def = tfapi.serialize(dataset)
    ops = [node.op for node in graph_def.node]
    assert "RangeDataset" in ops and "MapDataset" in ops and "_Retval" in ops


def test_dataset_from_graph_and_from_variant_rebuild_a_prefix():
    graph_def, stages = graph.read_graph(tf.data.Dataset.range(5).map(lambda x: x * 2).batch(2))
    prefix, spec = graph.prefix_graph(graph_def, stages[1].node)
    assert list(tfapi.rebuild(prefix, spec).as_numpy_iterator()) == [0, 2, 4, 6, 8]
    whole, spec = graph.prefix_graph(graph_def, stages[-1].node)
    assert [b.tolist() for b in tfapi.rebuild(whole, spec).as_numpy_iterator()] == [
        [0, 2], [4, 6], [8]]


def test_dummy_memory_cache_gives_a_rebuilt_cache_its_own_memory():
    graph_def, stages = graph.read_graph(tf.data.Dataset.range(3).cache())
    prefix, spec = graph.prefix_graph(graph_def, stages[-1].node)
    assert "DummyMemoryCache" in [node.op for node in prefix.node]
    assert list(tfapi.rebuild(prefix, spec).as_numpy_iterator()) == [0, 1, 2]


def test_dummy_seed_generator_gives_a_rebuilt_shuffle_its_own_seeds():
    graph_def, stages = graph.read_graph(tf.data.Dataset.range(10).shuffle(10, seed=1))
    prefix, spec = graph.prefix_graph(graph_def, stages[-1].node)
    assert "DummySeedGenerator" in [node.op for node in prefix.node]
    assert sorted(tfapi.rebuild(prefix, spec).as_numpy_iterator()) == list(range(10))


def test_get_model_proto_reads_autotunes_parallelism_and_raises_not_found_when_off():
    dataset = tf.data.Dataset.range(10**6).map(lambda x: x + 1, num_parallel_calls=-1)
    iterator = iter(dataset)
    measure.drain(iterator, 0.2)
    proto = tfapi.model_proto(iterator)
    (node,) = [n for n in proto.nodes.values() if n.name == "ParallelMapV2"]
    (parameter,) = [p for p in node.parameters if p.name == "parallelism"]
    assert parameter.tunable and parameter.min >= 1 and parameter.state_value >= 1
    assert node.num_elements > 0 and node.processing_time > 0
    options = tf.data.Options()
    options.autotune.enabled = False
    off = iter(dataset.with_options(options))
    next(off)
    assert tfapi.model_proto(off) is None  # NotFound inside


def test_op_def_registry_says_which_ops_are_stateful():
    assert tfapi.is_stateful("RandomUniform") and tfapi.is_stateful("LookupTableFindV2")
    assert not tfapi.is_stateful("MatMul") and not tfapi.is_stateful("StatelessRandomUniformV2")
    assert not tfapi.is_stateful("__no_such_op__")  # a function called by its name


def test_parallel_dataset_ops_take_the_inputs_and_attributes_the_rewrites_give_them():
    from tensorflow.python.framework import op_def_registry

    def inputs(op):
        return [arg.name for arg in op_def_registry.get(op).input_arg]

    assert inputs("ParallelMapDatasetV2") == ["input_dataset", "other_arguments",
                                              "num_parallel_calls"]
    assert inputs("ParallelInterleaveDatasetV4")[-4:] == [
        "block_length", "buffer_output_elements", "prefetch_input_elements",
        "num_parallel_calls"]
    assert inputs("ParallelBatchDataset") == ["input_dataset", "batch_size",
                                              "num_parallel_calls", "drop_remainder"]
    assert inputs("CacheDatasetV2") == ["input_dataset", "filename", "cache"]
    attrs = {a.name for a in op_def_registry.get("ParallelMapDatasetV2").attr}
    assert {"deterministic", "preserve_cardinality", "use_inter_op_parallelism"} <= attrs


def test_first_line_of_a_graph_execution_error_is_its_cause():
    error = tf.errors.InvalidArgumentError(
        None, None, "Graph execution error:\n\nDetected at node EagerPyFunc defined at:\n"
        "  File \"x.py\", line 3\n\nAttributeError: 'Image' object has no attribute 'x'\n"
        "\t [[{{node EagerPyFunc}}]] [Op:IteratorGetNext] name: ")
    assert tfapi.first_line(error) == "AttributeError: 'Image' object has no attribute 'x'"
    assert tfapi.first_line(ValueError("one\ntwo")) == "one"
