"""build_transformer: parameter counts (Table 3), sharing, caching, saving."""

import ast
import functools
import subprocess
import sys
import warnings
from pathlib import Path

import keras
import numpy as np
import pytest
from keras import ops

import keras_transformer as kt
from keras_transformer.models import (
    PAPER_PARAMETER_COUNTS_M,
    TransformerConfig,
    TransformerStack,
    build_transformer,
    decoder_model,
    encoder_model,
    presets,
)

SOURCE = np.array([[5, 6, 7, 8, 3, 0], [9, 10, 3, 0, 0, 0]], "int32")
TARGET = np.array([[2, 11, 12, 13, 14], [2, 15, 16, 0, 0]], "int32")
LABELS = np.array([[11, 12, 13, 14, 3], [15, 16, 3, 0, 0]], "int32")

VARIANTS = {
    "post_ln_shared": presets["tiny"],
    "pre_ln_learned_separate": presets["tiny"].replace(
        norm_first=True,
        position_encoding="learned",
        share_embeddings=False,
        target_vocabulary_size=700,
    ),
    # Shaw et al. (2018), keys and values, in every self-attention layer.
    "relative_positions": presets["tiny"].replace(
        attention_settings={"relative_positions": 2, "relative_values": True}
    ),
    # Ainslie et al. (2023): grouped-query (2 key/value heads of 4) and
    # multi-query attention.
    "grouped_query": presets["tiny"].replace(
        attention_settings={"num_key_value_heads": 2}
    ),
    "multi_query": presets["tiny"].replace(
        attention_settings={"num_key_value_heads": 1}
    ),
}


def decode_step_by_step(model):
    """Logits of TARGET fed one token at a time through the KV caches: one
    hypothesis per example (`decode_beam_step` with beam 1, as greedy
    decoding runs it)."""
    stack = TransformerStack.of(model)
    source_mask = ops.not_equal(SOURCE, 0)
    encoded = stack.encode(SOURCE, training=False)
    (batch, length), positions = TARGET.shape, np.arange(TARGET.shape[1])
    caches = stack.init_cache(encoded, length, beam_size=1)
    steps = []
    for index in range(length):
        # (batch, 1, length): the one hypothesis' own slots up to `index`.
        history = np.broadcast_to(positions <= index, (batch, 1, length))
        logits, caches = stack.decode_beam_step(
            TARGET[:, index : index + 1], caches, index, source_mask, history
        )
        steps.append(ops.convert_to_numpy(logits))
    return np.concatenate(steps, 1)


@pytest.mark.parametrize("name", ["base", "big", "table3_C_d256", "table3_C_d1024"])
def test_parameter_counts_match_table_3(name):
    """Absolute counts with a 37,000-token shared vocabulary agree with the
    paper within 5%: the paper rounds to millions and its rows imply an
    embedding of 36k-42k rows (see docs/architecture.md)."""
    millions = _millions_of_parameters(name)
    assert millions == pytest.approx(PAPER_PARAMETER_COUNTS_M[name], rel=0.05)


@functools.cache
def _millions_of_parameters(name: str) -> float:
    """The built preset's parameter count in millions, built once per name
    (the base model is every difference's reference)."""
    return build_transformer(presets[name]).count_params() / 1e6


@pytest.mark.parametrize(
    "name",
    sorted(
        name
        for name in PAPER_PARAMETER_COUNTS_M
        if name not in ("base", "big") and presets[name].d_model == 512
    ),
)
def test_parameter_differences_to_base_match_table_3(name):
    """Rows that keep d_model share the embedding with `base`: their difference
    to base must match the paper's to within its rounding (two numbers each
    rounded to 1M)."""
    base = _millions_of_parameters("base")
    row = _millions_of_parameters(name)
    paper = PAPER_PARAMETER_COUNTS_M[name] - PAPER_PARAMETER_COUNTS_M["base"]
    assert row - base == pytest.approx(paper, abs=1.0)


def test_base_model_shapes_and_exact_count():
    config = presets["base"]
    model = build_transformer(config)
    d, ff, v = 512, 2048, 37000
    attention = 4 * d * d + 4 * d
    ffn = 2 * d * ff + ff + d
    encoder_layer = attention + ffn + 2 * 2 * d
    decoder_layer = 2 * attention + ffn + 3 * 2 * d
    assert model.count_params() == v * d + 6 * encoder_layer + 6 * decoder_layer


def test_shared_vocabulary_uses_one_matrix():
    model = build_transformer(presets["tiny"])
    embeddings = [w for w in model.weights if "embeddings" in w.path]
    assert len(embeddings) == 1
    assert tuple(embeddings[0].shape) == (1000, 64)


def test_separate_vocabularies_tie_target_embedding_and_projection():
    model = build_transformer(VARIANTS["pre_ln_learned_separate"])
    embeddings = sorted(
        tuple(w.shape) for w in model.weights if w.path.endswith("/embeddings")
    )
    assert embeddings == [(700, 64), (1000, 64)]
    logits = model([SOURCE, TARGET])
    assert tuple(logits.shape) == (2, 5, 700)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_cached_decoding_equals_full_forward_pass(variant):
    model = build_transformer(VARIANTS[variant])
    full = ops.convert_to_numpy(model([SOURCE, TARGET], training=False))
    stepwise = decode_step_by_step(model)
    # Only real target positions matter (the cached path has no target padding).
    real = TARGET != 0
    np.testing.assert_allclose(stepwise[real], full[real], atol=1e-4)


def test_decoder_is_causal_and_padding_is_invisible():
    model = build_transformer(presets["tiny"].replace(dropout=0.0))
    first = ops.convert_to_numpy(model([SOURCE, TARGET]))
    target = TARGET.copy()
    target[0, 3] = 40
    second = ops.convert_to_numpy(model([SOURCE, target]))
    np.testing.assert_allclose(first[0, :3], second[0, :3], atol=1e-5)
    assert not np.allclose(first[0, 3:], second[0, 3:])
    # Extra padding on the source changes nothing.
    padded = np.pad(SOURCE, ((0, 0), (0, 3)))
    third = ops.convert_to_numpy(model([padded, TARGET]))
    np.testing.assert_allclose(first, third, atol=1e-5)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_save_load_and_split_models(tmp_path, variant):
    model = build_transformer(VARIANTS[variant])
    expected = ops.convert_to_numpy(model([SOURCE, TARGET]))
    path = tmp_path / "model.keras"
    model.save(path)
    restored = keras.models.load_model(path)
    np.testing.assert_allclose(
        ops.convert_to_numpy(restored([SOURCE, TARGET])), expected
    )
    encoder, decoder = encoder_model(restored), decoder_model(restored)
    encoded = encoder(SOURCE)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        split = decoder(
            [ops.convert_to_tensor(TARGET), encoded, ops.convert_to_tensor(SOURCE)]
        )
    # The encoder's output carries its padding mask; the decoder takes it
    # without Keras' "will destroy the mask information" warning.
    assert [str(warning.message) for warning in caught] == []
    np.testing.assert_allclose(ops.convert_to_numpy(split), expected, atol=1e-6)


def test_training_reduces_the_loss():
    config = presets["tiny"]
    model = build_transformer(config)
    model.compile(
        optimizer=kt.schedules.paper_adam(
            config.d_model, kt.schedules.OptimizerConfig(warmup_steps=20)
        ),
        loss=kt.losses.MaskedSparseCrossEntropy(),
        metrics=[kt.metrics.MaskedAccuracy(), kt.metrics.Perplexity()],
    )
    # Slots built before fit, not inside its first traced step (which
    # Keras would then trace twice): the same updates, about 5 s sooner.
    model.optimizer.build(model.trainable_variables)
    history = model.fit([SOURCE, TARGET], LABELS, epochs=15, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < 0.6 * losses[0]
    assert set(history.history) == {"loss", "token_accuracy", "perplexity"}


def test_mixed_float16_model_with_padding_is_finite():
    model = build_transformer(presets["tiny"], dtype="mixed_float16")
    logits = model([SOURCE, TARGET])
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"
    assert np.all(np.isfinite(ops.convert_to_numpy(logits)))
    block = model.get_layer("encoder_block_0")
    assert block.compute_dtype == "float16"
    assert block.self_attention_norm.variable_dtype == "float32"


def test_learned_positions_refuse_too_long_decoding():
    model = build_transformer(VARIANTS["pre_ln_learned_separate"])
    stack = TransformerStack.of(model)
    encoded = stack.encode(SOURCE)
    with pytest.raises(ValueError, match="longer than the model supports"):
        stack.init_cache(encoded, max_length=1000, beam_size=1)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"d_model": 65, "num_heads": 5}, "even d_model"),
        ({"d_model": 64, "num_heads": 3}, "not divisible by num_heads=3"),
        ({"dropout": 1.2}, "dropout=1.2"),
        ({"position_encoding": "rotary"}, "position_encoding='rotary'"),
        ({"target_vocabulary_size": 50}, "share_embeddings=True"),
        ({"num_encoder_layers": 0}, "num_encoder_layers=0"),
    ],
)
def test_config_validation(changes, message):
    with pytest.raises(ValueError, match=message):
        presets["tiny"].replace(**changes)


def test_config_json_round_trip_and_unknown_fields():
    config = presets["small"]
    assert TransformerConfig.from_json(config.to_json()) == config
    with pytest.raises(ValueError, match="d_modle"):
        TransformerConfig.from_dict({"d_modle": 4})


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(ValueError, match="base"):
        kt.models.get_preset("huge")
    # The dicts too (the README's `presets["small"]`); a bare KeyError('huge')
    # said nothing of the names there are.
    with pytest.raises(KeyError, match=r"No preset 'huge'; the presets are: base, "):
        kt.models.presets["huge"]
    with pytest.raises(
        KeyError, match=r"No preset 'Small'; the presets are: paper_cifar10, small\."
    ):
        kt.models.image_presets["Small"]
    assert kt.models.presets.get("huge") is None and "tiny" in kt.models.presets


def test_model_from_other_builder_is_refused():
    plain = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    with pytest.raises(ValueError, match="not built by build_transformer"):
        TransformerStack.of(plain)


def test_restricted_attention_model_caches_like_its_full_pass(tmp_path):
    model = build_transformer(presets["tiny"].replace(attention_settings={"window": 2}))
    full = ops.convert_to_numpy(model([SOURCE, TARGET], training=False))
    stepwise = decode_step_by_step(model)
    real = TARGET != 0
    np.testing.assert_allclose(stepwise[real], full[real], atol=1e-4)
    path = tmp_path / "restricted.keras"
    model.save(path)
    restored = keras.models.load_model(path)
    np.testing.assert_allclose(
        ops.convert_to_numpy(restored([SOURCE, TARGET])), full, atol=1e-6
    )
    assert restored.get_layer("encoder_block_0").attention_settings.window == 2


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_stack_attention_scores_and_last_position(variant):
    """`encode` / `decode` return the same logits with or without the
    attention weights, in a fixed structure; `last_position_only` is the
    last row of the full logits."""
    model = build_transformer(VARIANTS[variant])
    stack = TransformerStack.of(model)
    source_mask = ops.not_equal(SOURCE, 0)
    encoded = stack.encode(SOURCE, training=False)
    logits = ops.convert_to_numpy(
        stack.decode(TARGET, encoded, source_mask, training=False)
    )
    np.testing.assert_allclose(
        logits, ops.convert_to_numpy(model([SOURCE, TARGET], training=False))
    )

    encoded_too, encoder_scores = stack.encode(
        SOURCE, training=False, return_attention_scores=True
    )
    logits_too, decoder_scores = stack.decode(
        TARGET, encoded_too, source_mask, training=False, return_attention_scores=True
    )
    np.testing.assert_allclose(ops.convert_to_numpy(logits_too), logits, atol=1e-6)
    assert list(encoder_scores) == ["encoder_self"]
    assert list(decoder_scores) == ["decoder_self", "encoder_decoder"]
    config = VARIANTS[variant]
    (batch, source_length), target_length = SOURCE.shape, TARGET.shape[1]
    heads = config.num_heads
    assert len(encoder_scores["encoder_self"]) == config.num_encoder_layers
    assert all(
        tuple(s.shape) == (batch, heads, source_length, source_length)
        for s in encoder_scores["encoder_self"]
    )
    for kind, keys in [("decoder_self", target_length), ("encoder_decoder", 6)]:
        assert len(decoder_scores[kind]) == config.num_decoder_layers
        assert all(
            tuple(s.shape) == (batch, heads, target_length, keys)
            for s in decoder_scores[kind]
        )

    last = stack.decode(
        TARGET, encoded, source_mask, training=False, last_position_only=True
    )
    assert tuple(last.shape) == (batch, 1, logits.shape[-1])
    np.testing.assert_allclose(ops.convert_to_numpy(last), logits[:, -1:], atol=1e-6)


@pytest.mark.parametrize("append", [False, True])
@pytest.mark.parametrize(
    ("window", "relative", "kv_heads"),
    [
        (None, None, None),
        (1, None, None),
        (None, 2, None),
        (1, 2, None),
        (None, None, 2),
        (1, 2, 1),
    ],
)
def test_stack_decode_beam_step_follows_each_hypothesis_history(
    append, window, relative, kv_heads
):
    """Hypotheses that branch off each other at random, as in beam search:
    each one's logits equal `decode` on its own prefix, although the caches
    are never reordered (only the history table of slots is); with relative
    positions (Shaw et al., 2018) and grouped-query attention (Ainslie et
    al., 2023) too."""
    model = build_transformer(
        presets["tiny"].replace(
            attention_settings={
                "window": window,
                "relative_positions": relative,
                "relative_values": relative is not None,
                "num_key_value_heads": kv_heads,
            }
        )
    )
    stack = TransformerStack.of(model)
    source_mask = ops.not_equal(SOURCE, 0)
    encoded = stack.encode(SOURCE, training=False)
    batch, beam, steps = SOURCE.shape[0], 3, 5
    rng = np.random.default_rng(0)
    prefixes = [[[2] for _ in range(beam)] for _ in range(batch)]
    # history[b, k, t]: the slot holding hypothesis k's keys/values at t.
    history = np.zeros((batch, beam, steps), "int32")
    caches = stack.init_cache(encoded, 0 if append else steps, beam_size=beam)
    for index in range(steps):
        history[:, :, index] = np.arange(beam)
        length = index + 1 if append else steps
        # (batch, beam, length, beam) -> (batch, beam, length * beam)
        mask = history[:, :, :length, None] == np.arange(beam)
        mask &= (np.arange(length) <= index)[:, None]
        tokens = np.array([[p[-1] for p in rows] for rows in prefixes], "int32")
        logits, caches = stack.decode_beam_step(
            tokens,
            caches,
            index,
            source_mask,
            mask.reshape(batch, beam, length * beam),
            append=append,
        )
        assert tuple(logits.shape) == (batch, beam, 1000)
        for b in range(batch):
            expected = stack.decode(
                np.array(prefixes[b], "int32"),
                ops.repeat(encoded[b : b + 1], beam, axis=0),
                ops.repeat(source_mask[b : b + 1], beam, axis=0),
            )[:, -1]
            np.testing.assert_allclose(
                ops.convert_to_numpy(logits[b]),
                ops.convert_to_numpy(expected),
                atol=1e-4,
            )
        # A new generation: each hypothesis continues a random parent.
        parents = rng.integers(0, beam, size=(batch, beam))
        history = np.take_along_axis(history, parents[:, :, None], axis=1)
        prefixes = [
            [[*prefixes[b][parent], int(rng.integers(4, 100))] for parent in row]
            for b, row in enumerate(parents)
        ]


def test_models_import_neither_tensorflow_code_nor_decoding():
    """models/transformer.py is Keras only, and `keras_transformer.models`
    never pulls in decoding or visualize (which need TensorFlow)."""
    tree = ast.parse(Path(kt.models.transformer.__file__).read_text())
    imported = [
        alias.name
        for n in ast.walk(tree)
        if isinstance(n, ast.Import)
        for alias in n.names
    ]
    imported += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [name for name in imported if name.split(".")[0] == "tensorflow"]
    code = (
        "import sys, keras_transformer.models; "
        "print(sorted(m for m in sys.modules if m.startswith('keras_transformer.')"
        " and m.split('.')[1] in ('decoding', 'visualize', 'export')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert loaded.strip().splitlines()[-1] == "[]"
