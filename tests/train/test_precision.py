"""Precision policy: the hardware rules on faked hardware, measured mode, enable_policy, checks."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest

from tfopt.errors import InvalidArgumentError
from tfopt.gpu.hardware import TensorFlowInfo, cpu_features, gather_facts
from tfopt.gpu.testing import FakeGpu, make_fake_nvml
from tfopt.train import precision
from tfopt.train.precision import (
    POLICIES,
    PolicyChoice,
    check_model_precision,
    choose_policy,
    enable_policy,
    measure_policies,
)

AMX_CPU = "model name : Intel(R) Xeon(R) Platinum 8480+\nflags : avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
BF16_CPU = "model name : AMD EPYC 9654\nflags : avx2 avx512f avx512_bf16\n"
PLAIN_CPU = "model name : Intel(R) Xeon(R) Gold 6148\nflags : avx2 avx512f\n"


@pytest.fixture(autouse=True)
def float32_policy(tf):
    import keras

    keras.mixed_precision.set_global_policy("float32")
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy("float32")


@pytest.fixture
def keras(tf):
    import keras

    return keras


def facts_for(tmp_path, cpuinfo=PLAIN_CPU, gpus=(), init_error=None, visible_gpus=None, env=None):
    """HardwareFacts through the doctor's probes: a fake NVML and a written cpuinfo file."""
    path = tmp_path / "cpuinfo"
    path.write_text(cpuinfo)
    module = make_fake_nvml(list(gpus), init_error=init_error)
    facts = gather_facts(tensorflow=False, module=module, cpuinfo_path=str(path))
    tensorflow = None if visible_gpus is None else TensorFlowInfo(True, True, visible_gpus=visible_gpus)
    return dataclasses.replace(facts, tensorflow=tensorflow, env=dict(env or {}))


V100 = FakeGpu(name="Tesla V100-SXM2-16GB", compute_capability=(7, 0))
T4 = FakeGpu(name="Tesla T4", compute_capability=(7, 5))
A100 = FakeGpu(name="NVIDIA A100-SXM4-40GB", compute_capability=(8, 0))
P100 = FakeGpu(name="Tesla P100-PCIE-16GB", compute_capability=(6, 0))


@pytest.mark.parametrize(
    "gpus, prefer_bf16, expected, words",
    [
        ([V100], False, "mixed_float16", ["Tesla V100", "7.0", "float16 tensor cores"]),
        ([V100], True, "mixed_float16", ["needs 8.0+", "V100"]),
        ([A100, A100], False, "mixed_float16", ["all 2 NVIDIA GPUs"]),
        ([A100, A100], True, "mixed_bfloat16", ["bfloat16 tensor cores", "8.0+"]),
        ([A100, T4], True, "mixed_float16", ["GPU 1", "Tesla T4", "7.5"]),
        ([A100, P100], False, "float32", ["GPU 1", "Tesla P100", "6.0", "no tensor cores"]),
    ],
)
def test_gpu_rules(tmp_path, gpus, prefer_bf16, expected, words):
    # an AMX CPU beside the GPUs must not matter: training runs on the GPUs
    facts = facts_for(tmp_path, AMX_CPU, gpus=gpus, visible_gpus=len(gpus))
    choice = choose_policy(prefer_bfloat16=prefer_bf16, facts=facts, tpus=0)
    assert choice.name == expected
    assert choice.measured is None
    for word in words:
        assert word in choice.reason
    assert "\n" not in choice.reason


@pytest.mark.parametrize(
    "cpuinfo, expected, word",
    [
        (AMX_CPU, "mixed_bfloat16", "AMX"),
        (BF16_CPU, "mixed_bfloat16", "AVX512-BF16"),
        (PLAIN_CPU, "float32", "neither AMX nor AVX512-BF16"),
        ("flags : fpu\n", "float32", "no NVIDIA GPU"),
    ],
)
def test_cpu_rules(tmp_path, cpuinfo, expected, word):
    choice = choose_policy(facts=facts_for(tmp_path, cpuinfo), tpus=0)
    assert choice.name == expected
    assert word in choice.reason


def test_cpu_model_named_in_reason(tmp_path):
    assert "AMD EPYC 9654" in choose_policy(facts=facts_for(tmp_path, BF16_CPU), tpus=0).reason


def test_no_driver_falls_back_to_the_cpu(tmp_path):
    # NVML fails to initialise (driver not loaded): no GPUs, the CPU decides
    facts = facts_for(tmp_path, AMX_CPU, gpus=[A100], init_error=9)
    assert facts.gpus == ()
    assert choose_policy(facts=facts, tpus=0).name == "mixed_bfloat16"


def test_gpus_tensorflow_cannot_use_count_as_cpu(tmp_path):
    facts = facts_for(tmp_path, PLAIN_CPU, gpus=[A100], visible_gpus=0)
    choice = choose_policy(facts=facts, tpus=0)
    assert choice.name == "float32"
    assert "TensorFlow sees none of the 1 NVIDIA GPU" in choice.reason
    amx = facts_for(tmp_path, AMX_CPU, gpus=[A100], visible_gpus=0)
    assert choose_policy(facts=amx, tpus=0).name == "mixed_bfloat16"


def test_onednn_off_makes_bf16_cpu_float32(tmp_path):
    facts = facts_for(tmp_path, AMX_CPU, env={"TF_ENABLE_ONEDNN_OPTS": "0"})
    choice = choose_policy(facts=facts, tpus=0)
    assert choice.name == "float32"
    assert "TF_ENABLE_ONEDNN_OPTS=0" in choice.reason


def test_tpu_rule(tmp_path):
    choice = choose_policy(facts=facts_for(tmp_path, PLAIN_CPU), tpus=8)
    assert choice.name == "mixed_bfloat16"
    assert "8 TPU core(s)" in choice.reason
    # measuring on a TPU host would time the host CPU: the rule stands, nothing is measured
    measured = choose_policy(measure=True, facts=facts_for(tmp_path, PLAIN_CPU), tpus=8)
    assert measured.name == "mixed_bfloat16" and measured.measured is None
    assert "not measured" in measured.reason


def test_this_machine_without_injected_facts():
    # no NVIDIA driver and no TPU here: the real CPU flags decide
    expected = "mixed_bfloat16" if cpu_features().bf16_pays_off else "float32"
    choice = choose_policy()
    assert choice.name == expected
    assert choice.reason


def fake_trial(rates, calls):
    def trial(names):
        calls.append(tuple(names))
        result = {name: rates[name] for name in names}
        result["speedup"] = result[names[-1]] / result[names[0]]
        return result

    return trial


@pytest.mark.parametrize(
    "cpuinfo, gpus, rates, expected",
    [
        # the rule says bf16, the trial agrees
        (AMX_CPU, (), {"float32": 100.0, "mixed_bfloat16": 300.0}, "mixed_bfloat16"),
        # the rule says bf16, the trial disagrees: measurement wins
        (AMX_CPU, (), {"float32": 100.0, "mixed_bfloat16": 80.0}, "float32"),
        # the rule says float32; the CPU candidate is bf16 and turns out faster
        (PLAIN_CPU, (), {"float32": 100.0, "mixed_bfloat16": 120.0}, "mixed_bfloat16"),
        # the rule says float32 for an old GPU; the GPU candidate is float16
        (PLAIN_CPU, (P100,), {"float32": 100.0, "mixed_float16": 90.0}, "float32"),
    ],
)
def test_measured_mode_keeps_the_faster(tmp_path, monkeypatch, cpuinfo, gpus, rates, expected):
    calls = []
    monkeypatch.setattr(precision, "measure_policies", fake_trial(rates, calls))
    facts = facts_for(tmp_path, cpuinfo, gpus=gpus)
    choice = choose_policy(measure=True, facts=facts, tpus=0)
    assert calls == [tuple(rates)]
    assert choice.name == expected
    assert choice.measured == {**rates, "speedup": list(rates.values())[1] / rates["float32"]}
    assert "measured" in choice.reason and "examples/s" in choice.reason


def test_measure_policies_real_trial(keras):
    result = measure_policies(("float32", "mixed_bfloat16"), rounds=1, steps=1, batch_size=4)
    assert result["float32"] > 0 and result["mixed_bfloat16"] > 0
    assert result["speedup"] == pytest.approx(result["mixed_bfloat16"] / result["float32"])
    assert result["batch_size"] == 4 and result["rounds"] == 1
    assert keras.mixed_precision.global_policy().name == "float32"


def test_measure_policies_validates():
    with pytest.raises(InvalidArgumentError, match="valid: float32, mixed_float16"):
        measure_policies(("float32", "float8"))
    with pytest.raises(InvalidArgumentError, match="rounds=0: expected a positive integer"):
        measure_policies(rounds=0)


def test_policy_choice_validates_and_serialises():
    with pytest.raises(InvalidArgumentError, match="got 'half'"):
        PolicyChoice("half", "because")
    choice = PolicyChoice("float32", "plain CPU")
    assert choice.replace(name="mixed_bfloat16").name == "mixed_bfloat16"
    assert choice.to_dict() == {"name": "float32", "reason": "plain CPU", "measured": None}
    assert POLICIES == ("float32", "mixed_float16", "mixed_bfloat16")


def test_enable_policy_as_a_call(keras):
    policy = enable_policy("mixed_bfloat16").policy
    assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"
    assert policy.compute_dtype == "bfloat16" and policy.variable_dtype == "float32"
    layer = keras.layers.Dense(2)
    layer.build((None, 3))
    assert layer.compute_dtype == "bfloat16" and layer.kernel.dtype == "float32"


def test_enable_policy_as_a_context_restores(keras):
    keras.mixed_precision.set_global_policy("mixed_float16")
    with enable_policy(PolicyChoice("mixed_bfloat16", "test")) as policy:
        assert policy.name == "mixed_bfloat16"
        assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"
    assert keras.mixed_precision.global_policy().name == "mixed_float16"
    with pytest.raises(RuntimeError), enable_policy("float32"):
        assert keras.mixed_precision.global_policy().name == "float32"
        raise RuntimeError("inside")
    assert keras.mixed_precision.global_policy().name == "mixed_float16"


def test_inside_enable_policy_normalization_adapts_on_a_dataset_in_float32(keras, tf):
    x = np.random.default_rng(0).normal(50.0, 9.0, size=(96, 4)).astype("float32")
    data = tf.data.Dataset.from_tensor_slices(x).batch(8)
    keras_adapt = keras.layers.Normalization.adapt
    with enable_policy("mixed_bfloat16"):
        with pytest.raises(Exception, match="bfloat16"):  # Keras's own adapt, as it ships
            keras_adapt(keras.layers.Normalization(), data)
        with enable_policy("mixed_bfloat16"):  # nested: one wrapper
            layer = keras.layers.Normalization()
            layer.adapt(data)
        again = keras.layers.Normalization()
        again.adapt(data)  # still wrapped in the outer block
    assert keras.layers.Normalization.adapt is keras_adapt  # Keras's own again after the block
    for adapted in (layer, again):
        # the statistics in float32, as numpy's; the layer still computes in bfloat16
        np.testing.assert_allclose(adapted.mean.numpy().ravel(), x.mean(axis=0), rtol=1e-5)
        np.testing.assert_allclose(adapted.variance.numpy().ravel(), x.var(axis=0), rtol=1e-4)
        assert adapted.dtype_policy.name == "mixed_bfloat16" and adapted.compute_dtype == "bfloat16"
        assert adapted(keras.Input((4,))).dtype == "bfloat16"  # in a model


def test_enable_policy_accepts_a_keras_policy(keras):
    with enable_policy(keras.DTypePolicy("mixed_float16")):
        assert keras.mixed_precision.global_policy().name == "mixed_float16"


def test_enable_policy_unknown_name_lists_valid_ones(keras):
    with pytest.raises(InvalidArgumentError) as info:
        enable_policy("mixed_fp16")
    assert "'mixed_fp16'" in str(info.value)
    for name in POLICIES:
        assert name in str(info.value)
    assert keras.mixed_precision.global_policy().name == "float32"  # untouched


def dense_model(keras, last_dtype=None, activation="softmax"):
    return keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(3, activation=activation, dtype=last_dtype, name="head"),
        ]
    )


def test_check_float32_model_is_clean(keras):
    model = dense_model(keras)
    model.compile("sgd", "mse")
    assert check_model_precision(model) == []


def test_check_flags_a_half_precision_output(keras, caplog):
    with enable_policy("mixed_bfloat16"):
        model = dense_model(keras)
    with caplog.at_level(logging.WARNING, logger="tfopt"):
        warnings = check_model_precision(model)
    assert len(warnings) == 1
    assert "'head'" in warnings[0] and "bfloat16" in warnings[0]
    assert "give the last layer dtype='float32'" in warnings[0]
    assert warnings[0] in caplog.text


def test_check_float32_head_under_mixed_bfloat16_is_clean(keras):
    with enable_policy("mixed_bfloat16"):
        model = dense_model(keras, last_dtype="float32")
        model.compile("sgd", "mse")
    assert check_model_precision(model) == []


def test_check_float32_activation_after_a_half_dense_is_clean(keras):
    with enable_policy("mixed_float16"):
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(3),
                                  keras.layers.Activation("softmax", dtype="float32")])
    assert check_model_precision(model) == []


def test_check_confirms_loss_scaling_under_mixed_float16(keras, caplog):
    with enable_policy("mixed_float16"):
        model = dense_model(keras, last_dtype="float32")
        model.compile(keras.optimizers.SGD(0.1), "mse")
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    with caplog.at_level(logging.INFO, logger="tfopt"):
        assert check_model_precision(model) == []
    assert "loss scaling active" in caplog.text


def test_check_warns_without_loss_scaling(keras):
    with enable_policy("mixed_float16"):
        model = dense_model(keras, last_dtype="float32")
        model.compile(keras.optimizers.SGD(0.1), "mse", auto_scale_loss=False)
    warnings = check_model_precision(model)
    assert len(warnings) == 1
    assert "no loss scaling" in warnings[0] and "LossScaleOptimizer" in warnings[0]


def test_check_warns_when_only_the_layers_are_float16(keras):
    # layers built under mixed_float16, the Model outside it: compile() does not add loss scaling
    inputs = keras.Input((8,))
    with enable_policy("mixed_float16"):
        hidden = keras.layers.Dense(16, name="hidden")(inputs)
    outputs = keras.layers.Dense(1, name="out")(hidden)
    model = keras.Model(inputs, outputs)
    uncompiled = check_model_precision(model)
    assert len(uncompiled) == 1 and "compile() will not add loss scaling" in uncompiled[0]
    model.compile(keras.optimizers.SGD(0.1), "mse")
    assert not isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    warnings = check_model_precision(model)
    assert len(warnings) == 1 and "'hidden'" in warnings[0] and "no loss scaling" in warnings[0]
    # a static loss scale counts as loss scaling
    model.compile(keras.optimizers.SGD(0.1, loss_scale_factor=1024.0), "mse")
    assert check_model_precision(model) == []


def test_check_uncompiled_mixed_float16_model_only_flags_the_output(keras):
    with enable_policy("mixed_float16"):
        model = dense_model(keras)
    warnings = check_model_precision(model)
    assert len(warnings) == 1 and "float16" in warnings[0] and "'head'" in warnings[0]


def test_check_each_output_of_a_multi_output_model(keras):
    with enable_policy("mixed_bfloat16"):
        inputs = keras.Input((8,))
        logits = keras.layers.Dense(3, name="logits")(inputs)
        box = keras.layers.Dense(4, name="box", dtype="float32")(inputs)
        model = keras.Model(inputs, [logits, box])
    warnings = check_model_precision(model)
    assert len(warnings) == 1 and "'logits'" in warnings[0]


def test_check_subclassed_model_uses_its_last_layer(keras):
    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.hidden = keras.layers.Dense(4)
            self.final = keras.layers.Dense(2, name="final")

        def call(self, x):
            return self.final(self.hidden(x))

    with enable_policy("mixed_bfloat16"):
        model = Net()
    warnings = check_model_precision(model)
    assert len(warnings) == 1 and "'final'" in warnings[0]


def test_recurrent_layers_are_found_and_compute_in_reaches_their_cells(keras):
    from tfopt.train.precision import compute_in, recurrent_layers

    with enable_policy("mixed_bfloat16"):
        inputs = keras.Input((12, 3))
        hidden = keras.layers.Bidirectional(keras.layers.GRU(4, return_sequences=True),
                                            name="both")(inputs)
        hidden = keras.layers.LSTM(4, name="lstm")(hidden)
        model = keras.Model(inputs, keras.layers.Dense(1, dtype="float32")(hidden))
    assert sorted(recurrent_layers(model)) == ["both", "lstm"]
    lstm, both = model.get_layer("lstm"), model.get_layer("both")
    assert lstm.cell.compute_dtype == "bfloat16"
    compute_in(model, "float32")
    # the cells compute the recurrence: left in bfloat16 they would add casts, not save them
    assert {lstm.cell.compute_dtype, both.forward_layer.cell.compute_dtype,
            both.backward_layer.cell.compute_dtype} == {"float32"}
    assert model(np.ones((2, 12, 3), np.float32)).dtype == "float32"
    dense_only = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    assert recurrent_layers(dense_only) == []
