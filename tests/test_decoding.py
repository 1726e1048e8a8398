"""kt.decoding: cached greedy, beam search (§6.1, Wu et al. 2016), sampling."""

import dataclasses
import itertools
import math
import re
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import decoding
from keras_transformer.decoding import (
    BeamSearch,
    Decoder,
    DecodeResult,
    DecodeSettings,
    GreedySearch,
    get_decoder,
    run_search,
)
from keras_transformer.decoding import search as search_loop
from keras_transformer.models import build_transformer, presets
from keras_transformer.optimizers import Adam
from tests.former_decoding import former_beam_search_graph, former_run_beam_search

# The eager references call the model on one-token prefixes, where Keras warns
# about a softmax over a single key.
pytestmark = pytest.mark.filterwarnings("ignore:You are using a softmax")

PAD, START, END, A, B = 0, 2, 3, 4, 5

# Three sources of different lengths (5, 3 and 1 real tokens), padded.
SOURCES = np.array(
    [[5, 6, 7, 8, 9], [10, 11, 12, 0, 0], [13, 0, 0, 0, 0]], dtype="int32"
)
EXTRA = 4  # each example may generate (real source tokens + 4) tokens


# ------------------------------------------------ the one public tier, tersely
def _decode_with(
    model, sources, method, *, jit_compile=False, use_cache=True, **options
):
    """`Decoder(model).decode(sources, DecodeSettings(method=...))` with the
    call arguments (`max_length`, `seed`, `end_id`) split from the settings."""
    call = {k: options.pop(k) for k in ("max_length", "seed", "end_id") if k in options}
    settings = DecodeSettings(method=method, **options)
    decoder = get_decoder(model, jit_compile, use_cache)
    return decoder.decode(sources, settings, **call)


def greedy_decode(model, sources, **options):
    return _decode_with(model, sources, "greedy", **options)


def uncached_greedy_decode(model, sources, **options):
    return _decode_with(model, sources, "greedy", use_cache=False, **options)


def beam_search(model, sources, **options):
    return _decode_with(model, sources, "beam", **options)


def sample_decode(model, sources, **options):
    return _decode_with(model, sources, "sample", **options)


def run_greedy(step_fn, state, limits, **options):
    return run_search(GreedySearch(), step_fn, state, limits, **options)


def run_beam_search(
    step_fn,
    state,
    limits,
    *,
    beam_size=4,
    length_penalty_alpha=0.6,
    early_stop="exact",
    **options,
):
    strategy = BeamSearch(beam_size, length_penalty_alpha, early_stop)
    return run_search(strategy, step_fn, state, limits, **options)


@pytest.fixture(scope="module")
def model():
    """A random tiny model: no END in sight, so outputs run to their limits."""
    keras.utils.set_random_seed(7)
    return build_transformer(presets["tiny"].replace(dropout=0.0))


def _copy_batch(rng, size, width=6):
    """Sources of 2-5 tokens in 4..15; targets: the same, then END."""
    sources = np.zeros((size, width), "int32")
    inputs, labels = np.zeros_like(sources), np.zeros_like(sources)
    for row in range(size):
        length = rng.integers(2, width)
        tokens = rng.integers(4, 16, size=length)
        sources[row, :length] = tokens
        inputs[row, 0], inputs[row, 1 : length + 1] = START, tokens
        labels[row, :length], labels[row, length] = tokens, END
    return sources, inputs, labels


@pytest.fixture(scope="module")
def copy_model():
    """A smaller model trained for 300 steps to copy its input (about 10 s)."""
    from keras_transformer.losses import MaskedSparseCrossEntropy

    keras.utils.set_random_seed(0)
    config = presets["tiny"].replace(
        vocabulary_size=16, d_model=32, d_ff=64, num_heads=2, dropout=0.0
    )
    model = build_transformer(config)
    sources, inputs, labels = _copy_batch(np.random.default_rng(0), 64 * 300)
    model.compile(
        # The package's Adam, as `train()` uses: one fused update per
        # variable, so the first step traces about 3 s sooner than Keras' Adam.
        optimizer=Adam(3e-3),
        loss=MaskedSparseCrossEntropy(label_smoothing=0.0),
        jit_compile=False,
    )
    # Slots built before fit, not inside its first traced step (which
    # Keras would then trace twice): the same updates, about 5 s sooner.
    model.optimizer.build(model.trainable_variables)
    model.fit((sources, inputs), labels, batch_size=64, epochs=1, verbose=0)
    return model


# The random model never emits END (end_id=None makes sure); the copy model
# ends each output with END, at different steps.
CASES = [("model", None), ("copy_model", END)]


def _reference_greedy(model, sources, extra_length, end_id):
    """One example at a time, padding removed, full model on the prefix."""
    outputs = []
    for source in sources:
        source = source[source != PAD][None]
        prefix, score = [START], 0.0
        for _ in range(source.shape[1] + extra_length):
            logits = model([source, np.array([prefix], "int32")], training=False)
            log_probs = np.asarray(tf.nn.log_softmax(logits[0, -1]), "float64")
            log_probs[PAD] = -np.inf
            token = int(np.argmax(log_probs))
            score += log_probs[token]
            prefix.append(token)
            if token == end_id:
                break
        outputs.append((prefix[1:], score))
    return outputs


def _check_padded(result):
    for row, length in zip(result.token_ids, result.lengths, strict=True):
        assert np.all(row[length:] == PAD)
        assert np.all(row[:length] != PAD)


# ------------------------------------------------------------------- greedy
@pytest.mark.parametrize(("fixture", "end_id"), CASES)
def test_cached_greedy_matches_uncached_references(request, fixture, end_id):
    model = request.getfixturevalue(fixture)
    cached = greedy_decode(model, SOURCES, extra_length=EXTRA, end_id=end_id)
    uncached = uncached_greedy_decode(model, SOURCES, extra_length=EXTRA, end_id=end_id)
    reference = _reference_greedy(model, SOURCES, EXTRA, end_id)
    assert cached.to_list() == [tokens for tokens, _ in reference]
    np.testing.assert_allclose(cached.scores, [s for _, s in reference], atol=1e-3)
    np.testing.assert_array_equal(cached.token_ids, uncached.token_ids)
    np.testing.assert_allclose(cached.scores, uncached.scores, atol=1e-4)
    _check_padded(cached)
    assert cached.token_ids.dtype == np.int32 and cached.scores.dtype == np.float32
    limits = np.array([5, 3, 1]) + EXTRA
    if end_id is None:  # maximum output length = source length + extra
        np.testing.assert_array_equal(cached.lengths, limits)
        assert cached.token_ids.shape == (3, limits.max())
    else:  # END is the last token of every output
        assert np.all(cached.lengths < limits)
        rows = np.arange(len(SOURCES))
        assert np.all(cached.token_ids[rows, cached.lengths - 1] == end_id)


def test_greedy_with_xla_matches_graph(model):
    graph = greedy_decode(model, SOURCES, extra_length=EXTRA)
    xla = greedy_decode(model, SOURCES, extra_length=EXTRA, jit_compile=True)
    np.testing.assert_array_equal(graph.token_ids, xla.token_ids)
    np.testing.assert_allclose(graph.scores, xla.scores, atol=1e-4)


def test_max_length_caps_the_output(model):
    result = greedy_decode(model, SOURCES, max_length=3, end_id=None)
    assert result.token_ids.shape == (3, 3)
    np.testing.assert_array_equal(result.lengths, [3, 3, 3])


def test_search_inside_a_callers_tf_function(model):
    """`Decoder.search` (what export uses) gives the same outputs as
    `Decoder.decode`, traced in the caller's function."""
    decoder = Decoder(model)
    greedy_settings = DecodeSettings(method="greedy", extra_length=EXTRA)
    beam_settings = DecodeSettings(beam_size=2, extra_length=EXTRA)
    limits = np.array([5, 3, 1], "int32") + EXTRA
    width = 16  # the static length that `greedy` rounds up to

    @tf.function(autograph=False)
    def search(source_ids, limits):
        greedy = decoder.search(
            source_ids, limits, greedy_settings, max_length=width, end_id=None
        )
        beam = decoder.search(
            source_ids, limits, beam_settings, max_length=width, end_id=None
        )
        return greedy, beam

    (greedy_ids, greedy_scores, greedy_lengths), beam = search(
        tf.constant(SOURCES), tf.constant(limits)
    )
    expected = decoder.decode(SOURCES, greedy_settings, end_id=None)
    np.testing.assert_array_equal(greedy_lengths, expected.lengths)
    np.testing.assert_array_equal(
        np.asarray(greedy_ids)[:, : expected.token_ids.shape[1]], expected.token_ids
    )
    np.testing.assert_allclose(greedy_scores, expected.scores, atol=1e-5)
    expected = decoder.decode(SOURCES, beam_settings, end_id=None)
    beam_ids, beam_scores, beam_lengths = beam
    np.testing.assert_array_equal(beam_lengths, expected.lengths)
    np.testing.assert_array_equal(
        np.asarray(beam_ids)[:, : expected.token_ids.shape[1]], expected.token_ids
    )
    np.testing.assert_allclose(beam_scores, expected.scores, atol=1e-5)


def _while_bodies(graph_def) -> list:
    """The function definitions that `While` loops of `graph_def` run as
    their bodies, nested loops included."""
    functions = {f.signature.name: f for f in graph_def.library.function}
    bodies, pending = [], [list(graph_def.node)]
    while pending:
        for node in pending.pop():
            if node.op in ("While", "StatelessWhile"):
                body = functions[node.attr["body"].func.name]
                bodies.append(body)
                pending.append(list(body.node_def))
    return bodies


@pytest.mark.parametrize("static_shapes", [False, True], ids=["graph", "xla"])
def test_the_search_loop_projects_onto_the_vocabulary_without_a_transpose(
    model, static_shapes
):
    """The cached step's pre-softmax projection (§3.4) multiplies by `E^T`
    made once before the loop (`ScaledEmbedding.output_matrix`): no `MatMul`
    in the loop transposes an operand (`transpose_b` in every step was the
    slower product for the few rows of a sentence or two)."""
    decoder = Decoder(model)
    settings = DecodeSettings(beam_size=2, extra_length=EXTRA)

    @tf.function(autograph=False)
    def search(source_ids, limits):
        return decoder.search(
            source_ids, limits, settings, max_length=8, static_shapes=static_shapes
        )

    graph = search.get_concrete_function(
        tf.TensorSpec([None, None] if not static_shapes else [3, 6], tf.int32),
        tf.TensorSpec([None] if not static_shapes else [3], tf.int32),
    ).graph
    bodies = _while_bodies(graph.as_graph_def())
    assert bodies, "the search runs no While loop"
    products = [
        node for body in bodies for node in body.node_def if node.op == "MatMul"
    ]
    assert products, "no MatMul in the loop"
    transposed = [
        node.name
        for node in products
        if node.attr["transpose_a"].b or node.attr["transpose_b"].b
    ]
    assert transposed == []


def test_decoder_is_cached_per_model(model):
    assert get_decoder(model) is get_decoder(model)
    assert get_decoder(model) is not get_decoder(model, True)
    assert get_decoder(model) is not get_decoder(model, use_cache=False)


# -------------------------------------------------------------- beam search
@pytest.mark.parametrize(("fixture", "end_id"), CASES)
def test_beam_size_one_equals_greedy(request, monkeypatch, fixture, end_id):
    model = request.getfixturevalue(fixture)
    greedy = greedy_decode(model, SOURCES, extra_length=EXTRA, end_id=end_id)
    # `DecodeSettings(beam_size=1)` decodes greedily (its `strategy`); here
    # the beam strategy itself runs with one hypothesis, registered as greedy.
    settings = DecodeSettings(beam_size=1, alpha=0.0, extra_length=EXTRA)
    assert settings.strategy == "greedy"
    monkeypatch.setitem(decoding.STRATEGIES, "greedy", decoding.STRATEGIES["beam"])
    beam = Decoder(model).decode(SOURCES, settings, end_id=end_id)
    np.testing.assert_array_equal(beam.token_ids, greedy.token_ids)
    np.testing.assert_array_equal(beam.lengths, greedy.lengths)
    np.testing.assert_allclose(beam.scores, greedy.scores, atol=1e-4)


@pytest.mark.parametrize(("fixture", "end_id"), CASES)
def test_beam_batch_equals_one_by_one(request, fixture, end_id):
    model = request.getfixturevalue(fixture)
    args = {"beam_size": 3, "extra_length": EXTRA, "end_id": end_id}
    batched = beam_search(model, SOURCES, **args)
    _check_padded(batched)
    for row, source in enumerate(SOURCES):
        single = beam_search(model, source[source != PAD][None], **args)
        assert single.to_list()[0] == batched.to_list()[row]
        np.testing.assert_allclose(single.scores[0], batched.scores[row], atol=1e-4)


def test_beam_reorders_the_caches_like_full_recomputation(model):
    """Cached beam search equals beam search over an uncached step function."""
    sources, beam, max_length = SOURCES[:2], 3, 6
    repeated_sources = np.repeat(sources, beam, axis=0)

    def uncached_step(token_ids, prefix, index):
        # The state is the decoder input so far; the driver reorders it.
        prefix = prefix.numpy()
        prefix[:, int(index)] = token_ids.numpy()
        logits = model([repeated_sources, prefix[:, : int(index) + 1]])
        return tf.nn.log_softmax(logits[:, -1]), tf.constant(prefix)

    tokens, scores, lengths = run_beam_search(
        uncached_step,
        tf.zeros((len(repeated_sources), max_length), tf.int32),
        [max_length, max_length],
        max_length=max_length,
        beam_size=beam,
        end_id=None,
    )
    cached = beam_search(
        model, sources, beam_size=beam, max_length=max_length, end_id=None
    )
    np.testing.assert_array_equal(cached.token_ids, tokens.numpy())
    np.testing.assert_allclose(cached.scores, scores.numpy(), atol=1e-4)
    np.testing.assert_array_equal(cached.lengths, lengths.numpy())


def _former_beam_search(model, sources, beam_size, extra_length, end_id, xla):
    """The previous release's beam search (`tests.former_decoding`)."""
    limits = (sources != PAD).sum(axis=1) + extra_length
    max_length = int(limits.max())
    search = tf.function(
        lambda source_ids, limits: former_beam_search_graph(
            model,
            source_ids,
            limits,
            max_length=max_length,
            beam_size=beam_size,
            end_id=end_id,
        ),
        jit_compile=xla,
    )
    tokens, scores, lengths = search(tf.constant(sources), tf.constant(limits))
    return DecodeResult.from_outputs(tokens, scores, lengths)


# The XLA twins compile each search (about 10 s each): slow tests.
@pytest.mark.parametrize(
    "xla", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["graph", "xla"]
)
@pytest.mark.parametrize("beam_size", [2, 4])
@pytest.mark.parametrize(("fixture", "end_id"), CASES)
def test_beam_search_equals_the_former_algorithm(
    request, fixture, end_id, beam_size, xla
):
    """Caches that are never reordered (a history table of slots instead),
    shared encoder-decoder keys and values, growing caches and finished
    examples leaving the batch (graph) give the former outputs."""
    model = request.getfixturevalue(fixture)
    sources = np.concatenate([SOURCES, SOURCES[::-1]])  # six, finishing apart
    former = _former_beam_search(model, sources, beam_size, EXTRA, end_id, xla)
    result = beam_search(
        model,
        sources,
        beam_size=beam_size,
        extra_length=EXTRA,
        end_id=end_id,
        jit_compile=xla,
    )
    assert result.to_list() == former.to_list()
    np.testing.assert_array_equal(result.lengths, former.lengths)
    np.testing.assert_allclose(result.scores, former.scores, atol=1e-5)
    if end_id is not None:  # examples finished at different steps
        assert len(set(result.lengths)) > 1


def _drop_or_not(search, limits, **kwargs):
    """The outputs of `search` with and without `drop_finished`, in graph."""
    outputs = []
    for drop in (False, True):

        @tf.function(autograph=False)
        def run(limits, drop=drop):
            return search(limits, drop_finished=drop, **kwargs)

        outputs.append([x.numpy() for x in run(tf.constant(limits, tf.int32))])
    return outputs


def test_finished_examples_leave_the_batch_without_changing_outputs():
    """`drop_finished` (what a graph decoder does): same tokens, scores and
    lengths, with examples that finish early, late, or have nothing to do."""
    rng = np.random.default_rng(3)
    table = tf.constant(
        tf.nn.log_softmax(rng.normal(size=(97, 6)) * 2.0).numpy(), tf.float32
    )
    limits, beam = [4, 0, 1, 6, 2, 5], 3
    codes = tf.constant(np.arange(11, 17), tf.int64)

    def greedy(limits, **kwargs):
        return run_greedy(_hash_step(table), codes, limits, max_length=6, **kwargs)

    def beams(limits, **kwargs):
        return run_beam_search(
            _hash_step(table),
            tf.repeat(codes, beam),
            limits,
            max_length=6,
            beam_size=beam,
            **kwargs,
        )

    for search in (greedy, beams):
        kept, dropped = _drop_or_not(search, limits)
        for a, b in zip(kept, dropped, strict=True):
            np.testing.assert_allclose(a, b, atol=1e-6)
        lengths = kept[2]
        assert lengths[1] == 0 and len(set(lengths)) > 1  # finished apart
        assert np.all(kept[0][1] == PAD)


@pytest.mark.parametrize("drop", [False, True])
@pytest.mark.parametrize("beam", [2, 4])
@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.5])
def test_driver_equals_the_former_driver_on_random_tables(alpha, beam, drop):
    """Stopping an example once its best finished hypothesis can no longer be
    beaten (not its worst), and dropping it from the batch, change no output:
    16 examples, limits from 0 to 9."""
    rng = np.random.default_rng(int(alpha * 10) + beam)
    logits = rng.normal(size=(211, 7)) * 2.0
    table = tf.constant(tf.nn.log_softmax(logits).numpy(), tf.float32)
    limits = tf.constant([0, *rng.integers(1, 10, size=15)], tf.int32)
    codes = tf.constant(np.repeat(rng.integers(1, 10**6, size=16), beam), tf.int64)
    common = {"max_length": 9, "beam_size": beam, "length_penalty_alpha": alpha}
    former = tf.function(
        lambda: former_run_beam_search(_hash_step(table), codes, limits, **common)
    )()
    current = tf.function(
        lambda: run_beam_search(
            _hash_step(table), codes, limits, drop_finished=drop, **common
        )
    )()
    np.testing.assert_array_equal(current[0], former[0])
    np.testing.assert_array_equal(current[2], former[2])
    np.testing.assert_allclose(current[1], former[1], atol=1e-6)
    assert len(set(former[2].numpy())) > 3  # examples finished apart


def test_one_trace_serves_every_output_length(model):
    """In a graph the output length is a tensor: sources of other lengths
    reuse the trace (after the one relaxing the input shape)."""
    decoder = Decoder(model)
    settings = DecodeSettings(beam_size=2, extra_length=3)
    for width in (2, 9, 40, 3):
        decoder.decode(SOURCES[:, :1].repeat(width, 1), settings)
    assert decoder._search_fn.experimental_get_tracing_count() <= 2


def test_searches_and_scores_are_traced_without_autograph(model, autograph_calls):
    """The search is TensorFlow ops as written: AutoGraph, which would
    rewrite every package function the search reaches (about 270) on a
    process's first search, is never called by a search or a score."""
    decoder = Decoder(model)
    for settings in (
        DecodeSettings(method="greedy", extra_length=3),
        DecodeSettings(beam_size=2, extra_length=3),
        DecodeSettings(method="sample", top_k=5, extra_length=3),
    ):
        decoder.decode(SOURCES, settings, seed=1)
    decoder.decode(SOURCES, DecodeSettings(beam_size=2, extra_length=3), n_best=2)
    decoder.decode(SOURCES, DecodeSettings(beam_size=2), constraints=[[[A]]] * 3)
    decoder.score(SOURCES, [[A, B]] * 3)
    assert decoder._search_fn.experimental_get_tracing_count() == 5
    assert autograph_calls == []


def test_equal_settings_share_a_trace_and_a_new_rule_traces_again(model):
    """The compiled search is traced by the values of the settings it reads
    in Python, not by the `DecodeSettings` object: new objects and other
    alphas (a tensor) reuse the trace; another stopping rule is a new one."""
    decoder = Decoder(model)
    for alpha in (0.6, 0.6, 1.0, 0.0):
        settings = DecodeSettings(beam_size=2, alpha=alpha, extra_length=3)
        decoder.decode(SOURCES, settings, end_id=None)
    assert decoder._search_fn.experimental_get_tracing_count() == 1
    decoder.decode(SOURCES, settings.replace(early_stop="heuristic"), end_id=None)
    assert decoder._search_fn.experimental_get_tracing_count() == 2


# ----------------------------------------------- beam search on fake models
def _encode(prefix):
    code = 1
    for token in prefix:
        code = code * 8 + token
    return code


def _decode(code):
    tokens = []
    while code > 1:
        tokens.append(int(code % 8))
        code //= 8
    return tuple(reversed(tokens))


def _table_step(table, default):
    """Fixed probabilities `table[outputs so far]` as a step function (eager).

    The state is a code of each hypothesis' outputs, so a search that fails
    to reorder its state by parent reads the wrong rows.
    """

    def step(token_ids, codes, index):
        rows, new_codes = [], []
        for token, code in zip(token_ids.numpy(), codes.numpy(), strict=True):
            prefix = () if int(index) == 0 else (*_decode(code), int(token))
            rows.append(np.log(table.get(prefix, default)))
            new_codes.append(_encode(prefix))
        return tf.constant(np.array(rows, "float32")), tf.constant(new_codes, tf.int64)

    return step


def _one_example_of_two_beams(step, limit=8, max_length=8, **options):
    """`run_beam_search` of one example (two beams, one state row each)."""
    return run_beam_search(
        step,
        tf.constant([1, 1], tf.int64),  # the two beams of one example
        [limit],
        max_length=max_length,
        beam_size=2,
        **options,
    )


def _probs(**named):
    """A distribution over (pad, unk, start, END, A, B); pad gets ~0."""
    ids = {"end": END, "a": A, "b": B}
    probs = np.full(6, 1e-9)
    for name, value in named.items():
        probs[ids[name]] = value
    probs[[1, 2]] += (1.0 - probs.sum()) / 2
    return probs


# Two ways to finish: [A, END] with P = 0.5 * 0.4 = 0.2 (2 tokens) and
# [B, B, B, B, END] with P = 0.4 * 0.8 ** 4 = 0.16384 (5 tokens).
GNMT_TABLE = {
    (): _probs(a=0.5, b=0.4, end=0.05),
    (A,): _probs(end=0.4, a=0.3, b=0.2),
    (B,): _probs(b=0.8, end=0.05, a=0.05),
    (B, B): _probs(b=0.8, end=0.05, a=0.05),
    (B, B, B): _probs(b=0.8, end=0.05, a=0.05),
    (B, B, B, B): _probs(end=0.8, b=0.1, a=0.05),
}
GNMT_DEFAULT = _probs(end=0.1, a=0.2, b=0.2)
SHORT, LONG = [A, END], [B, B, B, B, END]


@pytest.mark.parametrize(
    ("alpha", "expected", "probability"),
    [(0.0, SHORT, 0.2), (0.6, LONG, 0.16384), (1.0, LONG, 0.16384)],
)
def test_length_penalty_decides_which_finished_hypothesis_wins(
    alpha, expected, probability
):
    # By hand, log P / ((5 + |Y|) / 6) ** alpha:
    # alpha = 0:   -1.609 (short) > -1.808 (long)
    # alpha = 0.6: -1.609 / 1.097 = -1.467 < -1.809 / 1.359 = -1.331
    short = math.log(0.2) / ((5 + 2) / 6) ** alpha
    long = math.log(0.16384) / ((5 + 5) / 6) ** alpha
    assert (short > long) == (alpha == 0.0)

    tokens, scores, lengths = _one_example_of_two_beams(
        _table_step(GNMT_TABLE, GNMT_DEFAULT), length_penalty_alpha=alpha
    )
    length = int(lengths.numpy()[0])
    assert list(tokens.numpy()[0, :length]) == expected
    assert np.all(tokens.numpy()[0, length:] == PAD)
    expected_score = math.log(probability) / ((5 + len(expected)) / 6) ** alpha
    assert scores.numpy()[0] == pytest.approx(expected_score, abs=1e-5)
    assert decoding.length_penalty(len(expected), alpha) == pytest.approx(
        ((5 + len(expected)) / 6) ** alpha
    )


def _hash_step(table):
    """Log-probs that depend on the whole prefix through a hash in the state."""

    def step(token_ids, codes, index):
        codes = (codes * 1000003 + tf.cast(token_ids, tf.int64) + 1) % 2147483647
        return tf.gather(table, codes % len(table)), codes

    return step


def _exhaustive_best(table, code, limit, alpha):
    """The best END-terminated output of at most `limit` tokens, by brute force."""
    best = (-np.inf, None)
    tokens = [t for t in range(table.shape[1]) if t not in (PAD, END)]
    for length in range(1, limit + 1):
        for body in itertools.product(tokens, repeat=length - 1):
            output, state, log_prob = (*body, END), code, 0.0
            for previous, token in zip((START, *output), output, strict=False):
                state = (state * 1000003 + previous + 1) % 2147483647
                log_prob += float(table[state % len(table), token])
            score = log_prob / ((5 + length) / 6) ** alpha
            best = max(best, (score, list(output)))
    return best


# A short hypothesis finishes at step 2 ([A, END], P = 0.198); a chain of Bs
# (P = 0.1485 after two tokens, then 0.98 a token) ends at the limit with a
# better normalised score: log(0.1485 * 0.98 ** 6) / lp(8) = -1.275 against
# log(0.198) / lp(2) = -1.476 (alpha 0.6).
_CHAIN = (B,) * 7
STOP_TABLE = {
    (): _probs(a=0.495, b=0.495),
    (A,): _probs(end=0.4, a=0.29, b=0.29),
    (B,): _probs(end=0.35, a=0.34, b=0.3),
    **{_CHAIN[:k]: _probs(b=0.98, a=0.005, end=0.005) for k in range(2, 7)},
    _CHAIN: _probs(end=0.98, a=0.005, b=0.005),
}


@pytest.mark.parametrize(
    ("early_stop", "expected", "steps"),
    [("exact", [*_CHAIN, END], 8), ("heuristic", [A, END], 2)],
)
def test_the_heuristic_stop_ends_sooner_and_may_miss_a_later_winner(
    early_stop, expected, steps
):
    """Exact: after step 2 the best live [B, A] (log P -1.784) could still
    win, since -1.784 / lp(8) = -1.121 > -1.476, and the chain does at step
    8. Heuristic: no live hypothesis would win if it ended now (-1.784 /
    lp(2) = -1.626), so the example stops after 2 steps with [A, END]."""
    calls = []
    table_step = _table_step(STOP_TABLE, _probs(end=0.1, a=0.445, b=0.445))

    def step(*args):
        calls.append(1)
        return table_step(*args)

    tokens, scores, lengths = _one_example_of_two_beams(step, early_stop=early_stop)
    length = int(lengths.numpy()[0])
    assert list(tokens.numpy()[0, :length]) == expected
    probability = 0.495 * (0.4 if early_stop == "heuristic" else 0.3 * 0.98**6)
    expected_score = math.log(probability) / ((5 + len(expected)) / 6) ** 0.6
    assert scores.numpy()[0] == pytest.approx(expected_score, abs=1e-5)
    assert len(calls) == steps


def test_the_stopping_rule_reaches_every_beam_search(model, monkeypatch):
    """`DecodeSettings.early_stop` reaches the registered strategy, its
    n-best and constrained variants included; the heuristic stop gives the
    beam search's output wherever a finished hypothesis already leads."""
    options = decoding.strategies.SearchOptions(DecodeSettings(beam_size=3), 0.6, 1.0)
    stop = options._replace(settings=options.settings.replace(early_stop="heuristic"))
    assert decoding.get_strategy("beam", stop).early_stop == "heuristic"
    assert decoding.get_strategy("beam", options).early_stop == "exact"
    n_best = decoding.get_strategy("beam", stop._replace(n_best=2))
    phrases = tf.constant([[[5, 0]]], tf.int32)
    constrained = decoding.get_strategy("greedy", stop._replace(phrases=phrases))
    assert (n_best.early_stop, constrained.early_stop) == ("heuristic",) * 2
    tokens, scores, lengths = _one_example_of_two_beams(
        _table_step(GNMT_TABLE, GNMT_DEFAULT), early_stop="heuristic"
    )
    assert list(tokens.numpy()[0, : int(lengths.numpy()[0])]) == LONG
    # `Decoder.decode` (eagerly and in its traced search) and `Decoder.search`
    # build the strategy with the settings' rule.
    seen = []

    def spy(options):
        rule = options.settings.early_stop
        seen.append(rule)
        return BeamSearch(options.settings.beam_size, options.alpha, rule)

    monkeypatch.setitem(decoding.STRATEGIES, "beam", spy)
    settings = DecodeSettings(beam_size=2, extra_length=EXTRA, early_stop="heuristic")
    Decoder(model).decode(SOURCES, settings, end_id=None)
    limits = tf.constant([3, 3, 3], tf.int32)
    Decoder(model).search(tf.constant(SOURCES), limits, settings, max_length=3)
    assert seen and set(seen) == {"heuristic"}


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_wide_beam_finds_the_exhaustive_optimum(alpha):
    """With a beam wider than all candidates, beam search is exact."""
    rng = np.random.default_rng(0)
    table = tf.nn.log_softmax(rng.normal(size=(101, 6)) * 2.0).numpy()
    table = table.astype("float32")
    limits, codes, beam = [3, 4], [11, 12], 320  # 4 ** 3 * 5 candidates
    tokens, scores, lengths = run_beam_search(
        _hash_step(tf.constant(table)),
        tf.constant(np.repeat(codes, beam), tf.int64),
        limits,
        max_length=4,
        beam_size=beam,
        length_penalty_alpha=alpha,
    )
    for row, (code, limit) in enumerate(zip(codes, limits, strict=True)):
        best_score, best_output = _exhaustive_best(table, code, limit, alpha)
        length = int(lengths.numpy()[row])
        assert list(tokens.numpy()[row, :length]) == best_output
        assert scores.numpy()[row] == pytest.approx(best_score, abs=1e-4)


def test_beam_search_without_a_static_vocabulary_gives_the_same_outputs():
    """A step whose log-probabilities have no static vocabulary size takes
    the per-hypothesis top-k with a dynamic `k`: the same tokens, scores and
    lengths as with the size known."""
    rng = np.random.default_rng(1)
    table = tf.constant(
        tf.nn.log_softmax(rng.normal(size=(101, 40)) * 2.0).numpy(), tf.float32
    )
    known = _hash_step(table)

    def hidden(token_ids, codes, index):
        log_probs, codes = known(token_ids, codes, index)
        return tf.raw_ops.PlaceholderWithDefault(
            input=log_probs, shape=[None, None]
        ), codes

    codes = tf.constant(np.repeat([11, 12, 13], 4), tf.int64)
    outputs = []
    for step in (known, hidden):

        @tf.function(autograph=False)
        def search(codes, step=step):
            return run_beam_search(step, codes, [5, 6, 7], max_length=7, beam_size=4)

        outputs.append([x.numpy() for x in search(codes)])
    (tokens, scores, lengths), (tokens_hidden, scores_hidden, lengths_hidden) = outputs
    np.testing.assert_array_equal(tokens_hidden, tokens)
    np.testing.assert_array_equal(lengths_hidden, lengths)
    np.testing.assert_array_equal(scores_hidden, scores)
    assert lengths.min() > 0


def test_beam_without_finished_hypothesis_returns_the_best_live_one():
    table = {(): _probs(a=0.6, b=0.3)}
    default = _probs(a=0.6, b=0.3)  # END has probability 0
    tokens, scores, lengths = _one_example_of_two_beams(
        _table_step(table, default), limit=3, max_length=5
    )
    np.testing.assert_array_equal(tokens.numpy()[0], [A, A, A, PAD, PAD])
    assert lengths.numpy()[0] == 3
    assert scores.numpy()[0] == pytest.approx(
        3 * math.log(0.6) / ((5 + 3) / 6) ** 0.6, abs=1e-5
    )


def test_greedy_driver_stops_each_example_at_end_or_limit():
    table = {(): _probs(a=0.6), (A,): _probs(a=0.6), (A, A): _probs(end=0.9)}
    tokens, scores, lengths = run_greedy(
        _table_step(table, _probs(b=0.6)),
        tf.constant([1, 1, 1], tf.int64),
        [5, 2, 0],
        max_length=5,
    )
    np.testing.assert_array_equal(
        tokens.numpy(),
        [[A, A, END, 0, 0], [A, A, 0, 0, 0], [0, 0, 0, 0, 0]],
    )
    np.testing.assert_array_equal(lengths.numpy(), [3, 2, 0])
    np.testing.assert_allclose(
        scores.numpy(), [math.log(0.6 * 0.6 * 0.9), math.log(0.36), 0.0], atol=1e-5
    )


# ------------------------------------------------------------------ errors
def test_max_length_beyond_learned_positions_raises():
    model = build_transformer(presets["tiny"].replace(position_encoding="learned"))
    with pytest.raises(ValueError, match="max_length=65"):
        greedy_decode(model, SOURCES, max_length=65)
    with pytest.raises(ValueError, match="max_length=65"):
        beam_search(model, SOURCES, max_length=65)
    # Without max_length the default (source + 50) is capped at the limit.
    long_source = np.full((1, 30), 5, "int32")
    result = greedy_decode(model, long_source, end_id=None)
    assert result.token_ids.shape == (1, 64)


@pytest.mark.parametrize(
    ("function", "kwargs", "message"),
    [
        (greedy_decode, {"max_length": 0}, "max_length"),
        (greedy_decode, {"extra_length": -1}, "extra_length"),
        (greedy_decode, {"end_id": 1000}, "end_id"),
        (beam_search, {"beam_size": 0}, "beam_size"),
        (beam_search, {"alpha": -0.5}, "alpha"),
        (sample_decode, {"temperature": 0.0}, "temperature"),
        (sample_decode, {"top_k": 0}, "top_k"),
    ],
)
def test_bad_arguments_raise_clear_errors(model, function, kwargs, message):
    with pytest.raises(ValueError, match=message):
        function(model, SOURCES, **kwargs)


def test_bad_source_raises(model):
    with pytest.raises(ValueError, match="source_ids"):
        greedy_decode(model, np.array([5, 6, 3]))
    with pytest.raises(ValueError, match="source_ids"):
        greedy_decode(model, np.array([[5, 6, 5000]]))


# ----------------------------------------------------------------- sampling
def test_sampling_is_reproducible_and_top_1_is_greedy(model):
    first = sample_decode(model, SOURCES, seed=3, extra_length=EXTRA)
    again = sample_decode(model, SOURCES, seed=3, extra_length=EXTRA)
    np.testing.assert_array_equal(first.token_ids, again.token_ids)
    _check_padded(first)
    top_1 = sample_decode(model, SOURCES, seed=3, top_k=1, extra_length=EXTRA)
    greedy = greedy_decode(model, SOURCES, extra_length=EXTRA)
    np.testing.assert_array_equal(top_1.token_ids, greedy.token_ids)
    np.testing.assert_allclose(top_1.scores, greedy.scores, atol=1e-4)


def test_decode_result_to_list():
    result = DecodeResult(
        token_ids=np.array([[7, 3, 0], [8, 9, 3]], "int32"),
        scores=np.zeros(2, "float32"),
        lengths=np.array([2, 3], "int32"),
    )
    assert result.to_list() == [[7, 3], [8, 9, 3]]
    assert result.to_list(strip_end=True) == [[7], [8, 9]]


# ---------------------------------------------------------------- copy task
def test_trained_copy_model_decodes_the_copy(copy_model):
    """After a few hundred steps on a copy task greedy and beam copy the input."""
    sources, _, labels = _copy_batch(np.random.default_rng(1), 16)
    expected = [list(row[row != PAD]) for row in labels]
    assert greedy_decode(copy_model, sources, extra_length=2).to_list() == expected
    assert beam_search(copy_model, sources, extra_length=2).to_list() == expected


# ------------------------------------------------------------ DecodeSettings
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("method", "nucleus"),
        ("beam_size", 0),
        ("beam_size", 2.0),
        ("alpha", -0.5),
        ("alpha", float("nan")),
        ("extra_length", -1),
        ("max_input_length", 1),
        ("temperature", 0.0),
        ("top_k", 0),
        ("early_stop", "never"),
    ],
)
def test_decode_settings_refuse_bad_values_in_one_line(field, value):
    with pytest.raises(ValueError, match=field) as error:
        DecodeSettings(**{field: value})
    assert "\n" not in str(error.value) and "Received" in str(error.value)


def test_decode_settings_defaults_are_the_papers():
    """§6.1: beam 4, alpha 0.6, outputs up to the input length + 50."""
    settings = DecodeSettings()
    assert (settings.method, settings.beam_size, settings.alpha) == ("beam", 4, 0.6)
    assert settings.extra_length == 50 and settings.strategy == "beam"
    assert settings.describe() == "beam 4, alpha 0.6"
    assert settings.early_stop == "exact"  # §6.1's search, run to its bound
    heuristic = settings.replace(early_stop="heuristic").describe()
    assert heuristic == "beam 4, alpha 0.6, heuristic stop"
    assert DecodeSettings(method="greedy", beam_size=3).strategy == "greedy"
    assert settings.replace(beam_size=1).describe() == "greedy"
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.beam_size = 2


def test_every_method_is_a_registered_strategy():
    assert set(decoding.STRATEGIES) == {"greedy", "beam", "sample"}
    options = decoding.strategies.SearchOptions(DecodeSettings(beam_size=3), 0.6, 1.0)
    assert decoding.get_strategy("beam", options).beam_size == 3
    with pytest.raises(ValueError, match="nucleus"):
        decoding.get_strategy("nucleus", options)


def test_a_new_strategy_is_one_registry_entry(model, monkeypatch):
    """A strategy registered under a new name is a `DecodeSettings.method`
    that `Decoder.decode` runs (here: greedy through another name)."""
    monkeypatch.setitem(decoding.STRATEGIES, "argmax", lambda options: GreedySearch())
    settings = DecodeSettings(method="argmax", extra_length=EXTRA)
    result = Decoder(model).decode(SOURCES, settings, end_id=None)
    expected = greedy_decode(model, SOURCES, extra_length=EXTRA, end_id=None)
    np.testing.assert_array_equal(result.token_ids, expected.token_ids)


def test_n_best_and_constraints_reach_the_registered_strategy(model, monkeypatch):
    """n-best lists and constrained search are the registered beam strategy
    built with the call's inputs: a factory put in its place sees them."""
    from keras_transformer.decoding.strategies import BeamSearch

    seen = []

    def spy(options):
        seen.append((options.n_best, options.phrases is not None))
        return BeamSearch(options.settings.beam_size, options.alpha)

    monkeypatch.setitem(decoding.STRATEGIES, "beam", spy)
    settings = DecodeSettings(beam_size=2, extra_length=EXTRA)
    decoder = Decoder(model)
    lists = decoder.decode(SOURCES, settings, end_id=None, n_best=2)
    decoder.decode(SOURCES, settings, end_id=None, constraints=[[[A]]] * 3)
    assert (2, False) in seen and (None, True) in seen
    # The spy's plain beam gives one hypothesis: a list of one per source.
    assert lists.token_ids.shape[:2] == (3, 1)
    with pytest.raises(ValueError, match="cannot be combined"):
        decoder.decode(SOURCES, settings, n_best=2, constraints=[[[A]]] * 3)


def test_uncached_beam_search_equals_cached(model):
    """`Decoder(use_cache=False)` (the reference) also runs beam search."""
    settings = DecodeSettings(beam_size=3, extra_length=EXTRA)
    cached = Decoder(model).decode(SOURCES, settings, end_id=None)
    uncached = Decoder(model, use_cache=False).decode(SOURCES, settings, end_id=None)
    assert cached.to_list() == uncached.to_list()
    np.testing.assert_allclose(cached.scores, uncached.scores, atol=1e-4)


# The defaults of `DecodeSettings`, each as a line that would declare it again.
_NAMES = (
    r"(beam_size|alpha|length_penalty|length_penalty_alpha|extra_length"
    r"|max_input_length)"
)
_REPEATED_DEFAULTS = re.compile(
    rf"^\s*{_NAMES}\s*(:[^=]+)?=\s*(4|0\.6|50|128)\b"  # a field, a parameter
    rf"|\b{_NAMES}=(4|0\.6|50|128)\b"  # a keyword argument
    r"|default=(4|0\.6|50|128)\b"  # a flag
)


def test_decode_defaults_are_declared_once():
    """Beam 4, alpha 0.6, extra length 50, input cap 128 are declared in
    `DecodeSettings` only: everything else reads them from there."""
    package = Path(decoding.__file__).parents[1]
    repeats = []
    for path in sorted(package.rglob("*.py")):
        if path.name == "settings.py" and path.parent.name == "decoding":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if _REPEATED_DEFAULTS.search(line.split("#")[0]):
                repeats.append(f"{path.relative_to(package)}:{number}: {line}")
    assert repeats == []
    settings_source = (package / "decoding" / "settings.py").read_text()
    assert "beam_size: int = 4" in settings_source
    assert "alpha: float = 0.6" in settings_source


def test_only_sampling_draws_from_numpys_generator(model):
    """A search without randomness leaves NumPy's global generator as it was
    (a training run's draws do not depend on validation)."""
    before = np.random.get_state()
    for method in ("greedy", "beam"):
        settings = DecodeSettings(method=method, beam_size=2, extra_length=2)
        get_decoder(model).decode(SOURCES, settings)
    after = np.random.get_state()
    np.testing.assert_array_equal(after[1], before[1])
    assert after[2] == before[2]
    get_decoder(model).decode(SOURCES, DecodeSettings(method="sample", extra_length=2))
    assert np.random.get_state()[2] != before[2] or not np.array_equal(
        np.random.get_state()[1], before[1]
    )


@pytest.mark.parametrize("length", [8000, 1024, 1200, 1031, 500])
def test_chunked_top_k_equals_tf_top_k_ties_included(length: int) -> None:
    """`search_loop.top_k` (by chunks) returns `tf.math.top_k`'s values and
    indices: random rows, peaked log-probabilities, rows of many equal
    values and of -inf (a masked vocabulary), for lengths with and without
    a divisor near 64."""
    rng = np.random.default_rng(length)
    rows = [
        rng.normal(size=(6, length)),
        np.log(rng.dirichlet(np.full(length, 0.05), size=6) + 1e-30),
        rng.integers(0, 3, size=(6, length)).astype("float64"),  # many ties
        np.where(rng.random((6, length)) < 0.99, -np.inf, rng.normal(size=(6, length))),
        np.zeros((2, length)),  # all tied
    ]
    for values in rows:
        values = tf.constant(values, tf.float32)
        for k in (1, 8, 9):
            got = search_loop.top_k(values, k)
            want = tf.math.top_k(values, k=k)
            np.testing.assert_array_equal(got[0].numpy(), want[0].numpy())
            np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())


@pytest.mark.parametrize(
    "jit_compile",
    [False, pytest.param(True, marks=pytest.mark.slow)],
    ids=["graph", "xla"],
)
@pytest.mark.parametrize("kv_heads", [2, 1])
def test_grouped_query_attention_decodes_like_the_uncached_reference(
    kv_heads, jit_compile
):
    """Grouped-query attention (Ainslie et al., 2023; 2 key/value heads of 4)
    and multi-query attention (1): cached greedy and beam search, in a
    TensorFlow graph (growing caches) and under XLA (fixed-size caches; the
    slow tests), equal the uncached reference step."""
    keras.utils.set_random_seed(kv_heads)
    config = presets["tiny"].replace(
        dropout=0.0, attention_settings={"num_key_value_heads": kv_heads}
    )
    assert config.num_heads == 4
    model = build_transformer(config)
    for beam in (1, 3):
        settings = DecodeSettings(beam_size=beam, extra_length=EXTRA)
        reference = Decoder(model, use_cache=False).decode(
            SOURCES, settings, end_id=None
        )
        cached = Decoder(model, jit_compile=jit_compile).decode(
            SOURCES, settings, end_id=None
        )
        assert cached.to_list() == reference.to_list()
        np.testing.assert_allclose(cached.scores, reference.scores, atol=1e-4)
