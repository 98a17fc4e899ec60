"""model_flops against hand counts: a multiply-add is 2, a bias add, activation or element-wise
op 1 per output element, a normalisation 4 per element, a pooling window its size per output."""

from __future__ import annotations

import numpy as np
import pytest

from tfopt.errors import InvalidArgumentError

keras = pytest.importorskip("keras")
layers = keras.layers


def flops(inputs, outputs):
    from tfopt.train.flops import model_flops

    return model_flops(keras.Model(inputs, outputs))


def one_layer(shape, layer):
    inputs = keras.Input(shape)
    return flops(inputs, layer(inputs)).forward


# (input shape, layer, hand count)
CASES = {
    "dense_relu": ((8,), lambda: layers.Dense(4, activation="relu"), 2 * 8 * 4 + 4 + 4),
    "dense_on_a_sequence_no_bias": ((5, 8), lambda: layers.Dense(4, use_bias=False),
                                    5 * 2 * 8 * 4),
    "conv2d_same": ((16, 16, 3), lambda: layers.Conv2D(8, 3, padding="same"),
                    2 * (16 * 16 * 8) * 27 + 16 * 16 * 8),
    "conv2d_strided_valid": ((17, 17, 4), lambda: layers.Conv2D(6, 3, strides=2),
                             2 * (8 * 8 * 6) * 36 + 8 * 8 * 6),
    "conv2d_dilated": ((10, 10, 2), lambda: layers.Conv2D(4, 3, dilation_rate=2),
                       2 * (6 * 6 * 4) * 18 + 6 * 6 * 4),
    "conv2d_groups": ((8, 8, 4), lambda: layers.Conv2D(6, 3, padding="same", groups=2),
                      2 * (8 * 8 * 6) * (9 * 2) + 8 * 8 * 6),
    "conv1d": ((20, 5), lambda: layers.Conv1D(7, 4), 2 * (17 * 7) * 20 + 17 * 7),
    "conv3d": ((6, 6, 6, 2), lambda: layers.Conv3D(3, 2), 2 * (125 * 3) * 16 + 125 * 3),
    "conv2d_transpose": ((4, 4, 3), lambda: layers.Conv2DTranspose(5, 3, strides=2,
                                                                   padding="same"),
                         2 * 16 * (9 * 5 * 3) + 8 * 8 * 5),
    "depthwise": ((8, 8, 3), lambda: layers.DepthwiseConv2D(3, padding="same",
                                                            depth_multiplier=2),
                  2 * (8 * 8 * 6) * 9 + 8 * 8 * 6),
    "separable": ((8, 8, 3), lambda: layers.SeparableConv2D(5, 3, padding="same"),
                  2 * 64 * 3 * 9 + 2 * 64 * 3 * 5 + 64 * 5),
    "einsum_dense": ((8,), lambda: layers.EinsumDense("ab,bc->ac", output_shape=4,
                                                      bias_axes="c"), 2 * 8 * 4 + 4),
    "lstm": ((10, 8), lambda: layers.LSTM(16), 10 * (2 * 4 * 16 * (8 + 16) + 4 * 16)),
    "gru_reset_after": ((10, 8), lambda: layers.GRU(16),
                        10 * (2 * 3 * 16 * (8 + 16) + 2 * 3 * 16)),
    "simple_rnn": ((10, 8), lambda: layers.SimpleRNN(16), 10 * (2 * 16 * 24 + 16)),
    "bidirectional_lstm": ((10, 8), lambda: layers.Bidirectional(layers.LSTM(16)),
                           2 * 10 * (2 * 4 * 16 * 24 + 4 * 16)),
    "batch_norm": ((8, 8, 3), lambda: layers.BatchNormalization(), 4 * 192),
    "layer_norm": ((10, 8), lambda: layers.LayerNormalization(), 4 * 80),
    "max_pooling": ((8, 8, 3), lambda: layers.MaxPooling2D(2), 4 * 4 * 3 * 4),
    "global_average": ((8, 8, 3), lambda: layers.GlobalAveragePooling2D(), 192),
    "embedding": ((10,), lambda: layers.Embedding(100, 8), 0),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_layer_kind_matches_its_hand_count(name):
    shape, make, expected = CASES[name]
    assert one_layer(shape, make()) == expected


def test_self_attention_counts_projections_scores_softmax_and_output():
    inputs = keras.Input((6, 8))
    attended = layers.MultiHeadAttention(num_heads=2, key_dim=4)(inputs, inputs)
    projection = 6 * 2 * 4 * (2 * 8 + 1)  # each of query, key and value, with its bias
    scores = 2 * 2 * 6 * 6 * 4 + 2 * 6 * 6  # the products, then the softmax
    weighted = 2 * 2 * 6 * 6 * 4
    output = 6 * 8 * (2 * 2 * 4 + 1)
    result = flops(inputs, attended)
    assert result.forward == 3 * projection + scores + weighted + output
    assert result.exact and list(result.by_layer) == [attended._keras_history[0].name]


def test_a_nested_model_and_merges_add_up_and_training_is_three_passes():
    inner = keras.Sequential([keras.Input((8,)), layers.Dense(4, name="inner_dense")])
    inputs = keras.Input((8,))
    left = inner(inputs)
    right = layers.Dense(4, use_bias=False, name="right")(inputs)
    merged = layers.Add()([left, right])
    result = flops(inputs, layers.Activation("relu")(merged))
    expected = (2 * 8 * 4 + 4) + 2 * 8 * 4 + 4 + 4
    assert result.forward == expected and result.training == 3 * expected
    assert result.by_layer["inner_dense"] == 2 * 8 * 4 + 4


def test_a_cnn_of_several_layers_is_the_sum_of_its_layers():
    inputs = keras.Input((28, 28, 1))
    x = layers.Conv2D(32, 3, activation="relu")(inputs)
    x = layers.MaxPooling2D(2)(x)
    x = layers.Conv2D(64, 3, activation="relu")(x)
    x = layers.MaxPooling2D(2)(x)
    x = layers.Flatten()(x)
    x = layers.Dropout(0.5)(x)
    outputs = layers.Dense(10, activation="softmax")(x)
    conv1 = 26 * 26 * 32 * (2 * 9 + 2)
    pool1 = 13 * 13 * 32 * 4
    conv2 = 11 * 11 * 64 * (2 * 9 * 32 + 2)
    pool2 = 5 * 5 * 64 * 4
    dense = 2 * 1600 * 10 + 10 + 10
    assert flops(inputs, outputs).forward == conv1 + pool1 + conv2 + pool2 + dense


def test_an_unknown_layer_is_named_not_guessed_and_the_model_is_left_as_it_was():
    from tfopt.train.flops import model_flops

    class Doubler(layers.Layer):
        def call(self, x):
            return x * 2.0

    inputs = keras.Input((8,))
    model = keras.Model(inputs, layers.Dense(2)(Doubler(name="doubler")(inputs)))
    result = model_flops(model)
    assert result.uncounted == ("doubler",) and not result.exact
    assert result.forward == 2 * 8 * 2 + 2
    assert all("call" not in vars(layer) for layer in model.layers)
    # a call of the layer's own stays: batch norm fused by fuse_batch_norm is still fused
    from tfopt.train.fused_batch_norm import fuse_batch_norm, is_fused

    images = keras.Input((8, 8, 3))
    normed = layers.BatchNormalization(name="bn")(layers.Conv2D(4, 3)(images))
    fused_model = keras.Model(images, normed)
    fuse_batch_norm(fused_model)
    assert model_flops(fused_model).by_layer["bn"] == 4 * 6 * 6 * 4
    assert is_fused(fused_model.get_layer("bn"))
    model.compile("sgd", "mse")
    model.fit(np.ones((4, 8)), np.ones((4, 2)), verbose=0)  # still trains


def test_inputs_of_unknown_size_need_an_example():
    from tfopt.train.flops import model_flops

    inputs = keras.Input((None,), dtype="int32")
    model = keras.Model(inputs, layers.LSTM(4)(layers.Embedding(50, 8)(inputs)))
    with pytest.raises(InvalidArgumentError, match="pass example= one batch"):
        model_flops(model)
    counted = model_flops(model, example=np.zeros((3, 10), np.int32))
    assert counted.forward == 10 * (2 * 4 * 4 * (8 + 4) + 4 * 4)
