"""The graph of the translation SavedModel: its signatures, searches and inputs.

`export_translator(model, tokenizer, export_dir)` writes a TensorFlow
SavedModel whose graph does the whole job: SentencePiece tokenization
(``tensorflow_text.SentencepieceTokenizer``), the paper's beam search ("beam
size of 4 and length penalty alpha = 0.6 ... maximum output length ...
input length + 50, but terminate early when possible", Vaswani et al. 2017,
§6.1) and detokenization. It loads with ``tf.saved_model.load`` in a process
that imports only ``tensorflow`` and ``tensorflow_text`` (for the
SentencePiece op), and TensorFlow Serving serves it as it is.

With ``jit_compile=True`` (``keras-transformer export --jit-compile``) a call
with 1 to 4 sentences runs its search compiled with XLA: the same
translations at a fraction of the latency, a compilation of a few seconds at
the first call of each batch size and source width (`COMPILED_BATCH_SIZES`,
`COMPILED_SOURCE_WIDTHS`), and TensorFlow Serving then needs
``--xla_cpu_compilation_enabled=true``. Larger batches run the same graph
either way.

Signatures (each takes ``sentences``, a ``tf.string`` tensor of shape
``[batch]``; any other shape, a scalar or a ``[batch, n]`` matrix, is
refused with ``InvalidArgumentError`` "expected a 1-D batch of strings,
shape [batch]; got shape [...]" instead of being flattened):

* ``serving_default`` (also ``translate``): ``translations`` (``tf.string``
  ``[batch]``) and ``scores`` (float32 ``[batch]``, the length-normalised
  beam score ``log P(Y | X) / lp(Y)``; the log-probability for greedy
  exports);
* ``translate_ids``: ``token_ids`` (int32 ``[batch, length]``: the output
  subword ids, END included, then 0), ``lengths`` (int32 ``[batch]``, END
  included) and ``scores``;
* ``n_best``: ``translations`` (``tf.string`` ``[batch, K]``) and ``scores``
  (float32 ``[batch, K]``, ``log P / lp(Y)``, best first; ``-inf`` for a
  slot without hypothesis), K the export's ``n_best`` setting when above 1,
  else its beam size (`export_n_best`);
* ``score`` (also takes ``targets``, ``[batch]``): forced decoding, the
  log-probability of each target given its sentence: ``scores`` (float32
  ``[batch]``), ``token_scores`` (``[batch, length]``, END last, then 0) and
  ``lengths`` (END included); targets keep their first
  ``max_output_length - 1`` subword tokens;
* ``translate_with_prefix`` (also takes ``prefixes``, ``[batch]``, ``""`` for
  none): ``translations`` and ``scores`` as ``translate``, each translation
  starting with its prefix (whose tokens add 0 to the score);
* ``translate_constrained`` (terminology): ``sentences`` and ``phrases``
  (``tf.string`` ``[batch, count]``, ``""`` where a sentence has fewer):
  ``translations``, ``scores`` and ``unmet`` (bool ``[batch, count]``, a
  phrase that could not be met); constrained beam search (Post and Vilar
  2018) with the export's settings.

Input rules, the same as `keras_transformer.translation.Translator` and
`keras_transformer.data.batch_for_eval`, so that exported and in-process
translations agree:

* a source is tokenized without START, cut to its first
  ``max_input_length - 1`` subword tokens, and END is appended (so at most
  ``max_input_length`` ids reach the encoder): the one TensorFlow function
  `keras_transformer.data.batching.encode_sources`, run eagerly by the
  translator and in this graph;
* a source with no subword token (``""``, only whitespace) gives ``""``,
  an all-zero row of ``token_ids``, length 0 and score 0, without decoding;
* each output may have the number of source ids (END included) plus
  ``extra_length`` tokens (§6.1: "input length + 50"), at most
  ``max_input_length + extra_length`` (the static size of the decoder's
  key/value caches), and at most the model's learned target positions.

`keras_transformer.export.saved_model.export_translator` writes them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2

from keras_transformer import validation
from keras_transformer.conventions import PAD_ID
from keras_transformer.data.batching import encode_sources
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.decoding import Decoder, DecodeSettings
from keras_transformer.export.settings import ExportSettings

__all__ = [
    "BATCH_SHAPE_MESSAGE",
    "COMPILED_BATCH_SIZES",
    "COMPILED_SOURCE_WIDTHS",
    "CONSTRAINED_SIGNATURE",
    "IDS_SIGNATURE",
    "INPUT_NAME",
    "N_BEST_SIGNATURE",
    "PREFIX_SIGNATURE",
    "SCORE_SIGNATURE",
    "TRANSLATE_SIGNATURE",
    "check_sentence_batch",
    "checked_shape",
    "export_n_best",
    "phrase_ids_from_strings",
    "phrases_met",
    "source_ids_from_strings",
    "translate_archive",
]

#: Name of the input of every signature.
INPUT_NAME = "sentences"
TRANSLATE_SIGNATURE = "translate"
IDS_SIGNATURE = "translate_ids"
#: The signatures of n-best lists, forced-decoding scores and target prefixes.
N_BEST_SIGNATURE = "n_best"
SCORE_SIGNATURE = "score"
PREFIX_SIGNATURE = "translate_with_prefix"
SCORE_PAIRS_MESSAGE = "score needs one target per sentence"
#: The start of the message of a refused input shape.
BATCH_SHAPE_MESSAGE = "expected a 1-D batch of strings, shape [batch]; got shape"


def check_sentence_batch(sentences: tf.Tensor) -> tf.Tensor:
    """`sentences`, after a run-time check that it is a 1-D ``[batch]`` tensor.

    The signatures of a loaded SavedModel do not check the shape of what
    they are fed (TensorFlow Serving's and ``signatures[...]``'s calls pass
    any shape to the graph): without this check a ``[batch, n]`` matrix was
    tokenized as ``batch * n`` sentences and a scalar came back as a batch
    of one. The rank is counted from the values of ``tf.shape`` (one per
    dimension) rather than read with ``tf.rank``: the graph optimizer knows
    the declared shape ``[None]`` and would fold ``tf.rank`` (and with it the
    assertion) to a constant. A few scalar ops per call, none per step.

    Raises:
        tf.errors.InvalidArgumentError: (when the graph runs) "expected a
            1-D batch of strings, shape [batch]; got shape [2 3]".
    """
    return checked_shape(sentences, [None], BATCH_SHAPE_MESSAGE)


def checked_shape(tensor: tf.Tensor, dims: list[int | None], message: str) -> tf.Tensor:
    """`tensor`, after a run-time check of its shape (see `check_sentence_batch`).

    Args:
        tensor: an input of a signature.
        dims: the expected size of each axis (None: any size).
        message: the start of the error, followed by the shape received.

    Raises:
        tf.errors.InvalidArgumentError: (when the graph runs) `message`
            and the shape, on another rank or another size.
    """
    shape = tf.shape(tensor)
    rank = tf.reduce_sum(tf.sign(shape + 1))  # each size >= 0 counts 1
    fits = tf.equal(rank, len(dims))
    # The sizes, padded with -1 to the expected rank (never out of range).
    sizes = tf.concat([shape, tf.fill([len(dims)], -1)], 0)[: len(dims)]
    for axis, size in enumerate(dims):
        if size is not None:
            fits = tf.logical_and(fits, tf.equal(sizes[axis], size))
    check = tf.debugging.Assert(
        fits, [message, shape], summarize=16, name="checked_shape"
    )
    with tf.control_dependencies([check]):
        return tf.identity(tensor)


def source_ids_from_strings(
    tokenizer: SubwordTokenizer, sentences: Any, max_input_length: int
) -> tuple[tf.Tensor, tf.Tensor]:
    """Tokenizes raw sentences into encoder inputs, in the graph.

    The source-cut rule of `keras_transformer.data.batching.encode_sources`
    (the first ``max_input_length - 1`` subword tokens, then END), padded.

    Args:
        tokenizer: the model's tokenizer.
        sentences: ``tf.string`` ``[batch]``.
        max_input_length: the longest source in ids, END included (>= 2).

    Returns:
        ``(source_ids, is_empty)``: int32 ``[batch, width]`` padded with 0
        (``width <= max_input_length``), and bool ``[batch]``, true for a
        sentence without any subword token (``""``, whitespace).
    """
    validation.check_int("max_input_length", max_input_length, 2)
    ids = encode_sources(tokenizer, sentences, max_input_length)
    is_empty = tf.equal(ids.row_lengths(), 1)  # END only: no subword token
    return ids.to_tensor(default_value=PAD_ID), is_empty


def _sources_and_limits(
    tokenizer: SubwordTokenizer, settings: ExportSettings, sentences: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor]:
    """The encoder inputs of raw `sentences` and each output's length bound:
    its source ids + `extra_length` (§6.1), at most `max_output_length`; 0
    for an empty sentence (done before the first step: empty output)."""
    sentences = check_sentence_batch(sentences)
    source, is_empty = source_ids_from_strings(
        tokenizer, sentences, settings.decode.max_input_length
    )
    source_lengths = tf.reduce_sum(tf.cast(source != PAD_ID, tf.int32), 1)
    limits = tf.minimum(
        source_lengths + settings.decode.extra_length, settings.max_output_length
    )
    return source, tf.where(is_empty, 0, limits)


#: Sentences per call of the XLA-compiled searches
#: (`export_translator(jit_compile=True)`): a call with at most the last
#: count is padded with empty sentences to the first count that holds it
#: (finished before the first step: they add rows, never steps); larger
#: batches run the graph. XLA needs static shapes; for a few sentences per
#: call the graph's per-op cost, not the arithmetic, is what the search
#: spends, and XLA removes most of it; from about 8 sentences on the graph's
#: matrix products are the faster ones (`benchmarks/small_batches.py`).
COMPILED_BATCH_SIZES = (1, 2, 4)

#: Source widths of the XLA-compiled searches: a source is padded to the
#: first width that holds it, or to `max_input_length`, and its search is
#: sized for that width + `extra_length`. With `COMPILED_BATCH_SIZES`, at
#: most six programs are compiled, each at its first call.
COMPILED_SOURCE_WIDTHS = (32,)


def _compiled_search(
    decoder: Decoder, settings: ExportSettings
) -> Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, ...]]:
    """`(source_ids (batch, width), limits (batch,)) -> Decoder.search
    outputs` (`max_output_length` wide) for 1 to `COMPILED_BATCH_SIZES[-1]`
    sentences, searched with static shapes under XLA."""
    max_input = settings.decode.max_input_length
    widths = sorted({w for w in COMPILED_SOURCE_WIDTHS if w < max_input} | {max_input})
    length = settings.max_output_length

    def compiled(rows: int, width: int) -> Callable[[tf.Tensor, tf.Tensor], Any]:
        max_length = min(width + settings.decode.extra_length, length)
        jitted = tf.function(
            functools.partial(
                decoder.search,
                settings=settings.decode,
                max_length=max_length,
                start_id=settings.start_id,
                end_id=settings.end_id,
                static_shapes=True,
            ),
            jit_compile=True,
            autograph=False,
        )

        def search(source: tf.Tensor, limits: tf.Tensor) -> tuple[tf.Tensor, ...]:
            batch = tf.shape(source)[0]
            # Empty sentences fill the batch: limit 0, done before the first step.
            source = tf.pad(
                source, [[0, rows - batch], [0, width - tf.shape(source)[1]]]
            )
            limits = tf.pad(limits, [[0, rows - batch]])
            token_ids, scores, lengths = jitted(
                tf.reshape(source, [rows, width]), tf.reshape(limits, [rows])
            )
            token_ids = tf.pad(token_ids, [[0, 0], [0, length - max_length]])
            return token_ids[:batch], scores[:batch], lengths[:batch]

        return search

    searches = [
        compiled(rows, width) for rows in COMPILED_BATCH_SIZES for width in widths
    ]

    def search(source: tf.Tensor, limits: tf.Tensor) -> tuple[tf.Tensor, ...]:
        def bucket(sizes: list[int], size: tf.Tensor) -> tf.Tensor:
            return tf.reduce_sum(tf.cast(tf.constant(sizes[:-1]) < size, tf.int32))

        rows = bucket(list(COMPILED_BATCH_SIZES), tf.shape(source)[0])
        branch = rows * len(widths) + bucket(widths, tf.shape(source)[1])
        return tf.switch_case(branch, [lambda f=f: f(source, limits) for f in searches])

    return search


def _either_search(
    decoder: Decoder,
    compiled: Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, ...]],
    settings: ExportSettings,
    source: tf.Tensor,
    limits: tf.Tensor,
) -> tuple[tf.Tensor, ...]:
    """The XLA search of `compiled` for a few sentences, the graph's for a
    larger batch.

    The graph search runs in a lowered `tf.cond` unless there are 1 to
    `COMPILED_BATCH_SIZES[-1]` sentences (on no rows it still ran its
    encoder and its loop's set-up at every call); the compiled one, in an
    `If` whose branches stay functions (`_functional_cond`), on those rows
    or on none; their outputs are stacked. One `tf.cond` between the two
    searches ran the graph search as a function called at every step (its
    loop not lowered: 1.3x slower) or, lowered, let Grappler's constant
    folding give it the compiled search's batch size.
    """
    batch = tf.shape(source)[0]
    is_small = (batch >= 1) & (batch <= COMPILED_BATCH_SIZES[-1])

    def nothing() -> tuple[tf.Tensor, ...]:
        return (
            tf.zeros([0, settings.max_output_length], tf.int32),
            tf.zeros([0], tf.float32),
            tf.zeros([0], tf.int32),
        )

    def graph_search() -> tuple[tf.Tensor, ...]:
        return decoder.search(
            source,
            limits,
            settings.decode,
            max_length=settings.max_output_length,
            start_id=settings.start_id,
            end_id=settings.end_id,
        )

    graph_outputs = tf.cond(is_small, nothing, graph_search)

    compiled_outputs = _functional_cond(
        is_small, lambda: compiled(source, limits), nothing
    )
    return tuple(
        tf.concat([a, b], 0)
        for a, b in zip(graph_outputs, compiled_outputs, strict=True)
    )


def _functional_cond(
    predicate: tf.Tensor, true_fn: Callable[[], Any], false_fn: Callable[[], Any]
) -> Any:
    """`tf.cond` whose branches stay functions at run time.

    A `tf.cond` in a `tf.function` is lowered to one graph of both branches
    (Switch/Merge), and Grappler's shape inference and constant folding see
    them together. Its `If` op keeps its branches as functions when it is
    not lowered (its attribute ``_lower_using_switch_merge``, saved with the
    graph).
    """
    graph = tf.compat.v1.get_default_graph()
    known = {op.name for op in graph.get_operations()}
    outputs = tf.cond(predicate, true_fn, false_fn)
    for op in graph.get_operations():
        if op.name not in known and op.type in ("If", "StatelessIf"):
            op._set_attr(  # noqa: SLF001 (no public switch for this)
                "_lower_using_switch_merge", attr_value_pb2.AttrValue(b=False)
            )
    return outputs


def _search_graph(
    decoder: Decoder,
    tokenizer: SubwordTokenizer,
    settings: ExportSettings,
    sentences: tf.Tensor,
    prefixes: tf.Tensor | None = None,
    n_best: int | None = None,
) -> tuple[tf.Tensor, ...]:
    """The search of `settings` on raw `sentences`, as ops of the caller's
    graph: `Decoder.search`'s outputs (with a forced target prefix per
    sentence, or `NBestBeamSearch`'s lists, where asked)."""
    length = settings.max_output_length
    source, limits = _sources_and_limits(tokenizer, settings, sentences)
    prefix = None
    if prefixes is not None:
        prefix_ids = tokenizer.tokenize(check_sentence_batch(prefixes))
        dense = prefix_ids.to_tensor(default_value=PAD_ID)
        # At least one column, even when every prefix is empty.
        padding = tf.zeros([tf.shape(dense)[0], 1], dense.dtype)
        prefix = (
            tf.concat([dense, padding], 1),
            tf.cast(prefix_ids.row_lengths(), tf.int32),
        )
    options = {
        "max_length": length,
        "start_id": settings.start_id,
        "end_id": settings.end_id,
    }
    # The search of `Decoder`, as ops of this graph.
    return decoder.search(
        source, limits, settings.decode, prefix=prefix, n_best=n_best, **options
    )


def _decode_function(
    model: keras.Model, tokenizer: SubwordTokenizer, settings: ExportSettings
) -> tf.types.experimental.GenericFunction:
    """`sentences -> (token_ids, scores, lengths)` as one `tf.function`.

    The search is `Decoder.search` (the model's key/value-cached step in
    `keras_transformer.decoding`'s one loop), traced with the static output
    length `settings.max_output_length`.
    """
    decoder = Decoder(model)
    compiled = _compiled_search(decoder, settings) if settings.jit_compile else None

    def decode(sentences: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        if compiled is None:
            token_ids, scores, lengths = _search_graph(
                decoder, tokenizer, settings, sentences
            )
        else:
            token_ids, scores, lengths = _either_search(
                decoder,
                compiled,
                settings,
                *_sources_and_limits(tokenizer, settings, sentences),
            )
        width = tf.maximum(tf.reduce_max(tf.concat([lengths, [0]], 0)), 1)
        return token_ids[:, :width], scores, lengths

    return tf.function(
        decode,
        input_signature=[tf.TensorSpec([None], tf.string, name=INPUT_NAME)],
        autograph=False,
    )


def translate_archive(
    model: keras.Model, tokenizer: SubwordTokenizer, settings: ExportSettings
) -> keras.export.ExportArchive:
    """The SavedModel's endpoints: `translate` (strings) and `translate_ids`."""
    decode = _decode_function(model, tokenizer, settings)
    spec = [tf.TensorSpec([None], tf.string, name=INPUT_NAME)]

    def translate(sentences: tf.Tensor) -> dict[str, tf.Tensor]:
        token_ids, scores, _ = decode(sentences)
        return {
            "translations": tokenizer.detokenize(token_ids),
            "scores": tf.identity(scores),
        }

    def translate_ids(sentences: tf.Tensor) -> dict[str, tf.Tensor]:
        token_ids, scores, lengths = decode(sentences)
        return {
            "token_ids": tf.identity(token_ids),
            "lengths": tf.identity(lengths),
            "scores": tf.identity(scores),
        }

    archive = keras.export.ExportArchive()
    archive.track(model)
    # The tokenizer's SentencePiece resource must be saved with the graph.
    archive.track(tokenizer)
    # The first endpoint is also `serving_default`.
    archive.add_endpoint(TRANSLATE_SIGNATURE, translate, spec)
    archive.add_endpoint(IDS_SIGNATURE, translate_ids, spec)
    _add_constrained_endpoint(archive, model, tokenizer, settings)
    _add_feature_endpoints(archive, model, tokenizer, settings)
    return archive


# ---------------------------------------- n-best, scoring, target prefixes
def export_n_best(settings: DecodeSettings) -> int:
    """Hypotheses per sentence of the ``n_best`` signature: `settings.n_best`
    when above 1, else the whole beam (1 for greedy decoding, sampling)."""
    if settings.strategy != "beam":
        return 1
    return settings.n_best if settings.n_best > 1 else settings.beam_size


def _n_best_endpoint(
    decoder: Decoder, tokenizer: SubwordTokenizer, settings: ExportSettings
) -> Any:
    """``n_best``: sentences -> ``translations`` and ``scores`` ``[batch, K]``."""
    k = export_n_best(settings.decode)

    def n_best(sentences: tf.Tensor) -> dict[str, tf.Tensor]:
        if settings.decode.strategy == "beam":
            token_ids, scores, _, _ = _search_graph(
                decoder, tokenizer, settings, sentences, n_best=k
            )
        else:
            outputs = _search_graph(decoder, tokenizer, settings, sentences)
            token_ids, scores = outputs[0][:, None], outputs[1][:, None]
        # (batch * K, length) -> texts (batch, K)
        flat = tf.reshape(token_ids, [-1, tf.shape(token_ids)[-1]])
        texts = tf.reshape(tokenizer.detokenize(flat), [-1, k])
        return {"translations": texts, "scores": tf.identity(scores)}

    return n_best


def _score_endpoint(
    decoder: Decoder, tokenizer: SubwordTokenizer, settings: ExportSettings
) -> Any:
    """``score``: sentences, targets -> ``log P(target | source)`` (forced
    decoding, `Decoder.score`): ``scores`` ``[batch]``, ``token_scores``
    ``[batch, length]`` (END last, then 0) and ``lengths`` (END included)."""

    def score(sentences: tf.Tensor, targets: tf.Tensor) -> dict[str, tf.Tensor]:
        sentences = check_sentence_batch(sentences)
        targets = check_sentence_batch(targets)
        tf.debugging.assert_equal(
            tf.shape(sentences), tf.shape(targets), message=SCORE_PAIRS_MESSAGE
        )
        source, _ = source_ids_from_strings(
            tokenizer, sentences, settings.decode.max_input_length
        )
        # Targets keep at most `max_output_length - 1` tokens, then END.
        ids = tokenizer.tokenize(targets)[:, : settings.max_output_length - 1]
        dense = ids.to_tensor(default_value=PAD_ID)
        lengths = tf.cast(ids.row_lengths(), tf.int32)
        batch = tf.shape(dense)[0]
        inputs = tf.concat([tf.fill([batch, 1], settings.start_id), dense], 1)
        labels = tf.concat([dense, tf.zeros([batch, 1], tf.int32)], 1)
        at_end = tf.equal(tf.range(tf.shape(labels)[1])[None], lengths[:, None])
        labels = tf.where(at_end, settings.end_id, labels)
        token_scores = decoder.forced_log_probs(source, inputs, labels)
        return {
            "scores": tf.reduce_sum(token_scores, axis=1),
            "token_scores": token_scores,
            "lengths": lengths + 1,
        }

    return score


def _add_feature_endpoints(
    archive: keras.export.ExportArchive,
    model: keras.Model,
    tokenizer: SubwordTokenizer,
    settings: ExportSettings,
) -> None:
    """The signatures ``n_best``, ``score`` and ``translate_with_prefix``
    (see the module docstring) beside ``serving_default``."""
    decoder = Decoder(model)
    sentences = tf.TensorSpec([None], tf.string, name=INPUT_NAME)

    def translate_with_prefix(
        sentences: tf.Tensor, prefixes: tf.Tensor
    ) -> dict[str, tf.Tensor]:
        token_ids, scores, _ = _search_graph(
            decoder, tokenizer, settings, sentences, prefixes
        )
        return {
            "translations": tokenizer.detokenize(token_ids),
            "scores": tf.identity(scores),
        }

    archive.add_endpoint(
        N_BEST_SIGNATURE, _n_best_endpoint(decoder, tokenizer, settings), [sentences]
    )
    archive.add_endpoint(
        SCORE_SIGNATURE,
        _score_endpoint(decoder, tokenizer, settings),
        [sentences, tf.TensorSpec([None], tf.string, name="targets")],
    )
    archive.add_endpoint(
        PREFIX_SIGNATURE,
        translate_with_prefix,
        [sentences, tf.TensorSpec([None], tf.string, name="prefixes")],
    )


# ---------------- terminology constraints (Post and Vilar 2018): one signature
CONSTRAINED_SIGNATURE = "translate_constrained"
PHRASES_NAME = "phrases"


def phrase_ids_from_strings(tokenizer: SubwordTokenizer, phrases: Any) -> tf.Tensor:
    """``tf.string`` ``[batch, count]`` target phrases (``""``: none) as
    int32 ids ``[batch, count, length]``, 0 after each phrase."""
    batch, count = tf.shape(phrases)[0], tf.shape(phrases)[1]
    ids = tokenizer.tokenize(tf.reshape(phrases, [-1])).to_tensor(PAD_ID)
    ids = tf.pad(ids, [[0, 0], [0, tf.maximum(1 - tf.shape(ids)[1], 0)]])
    return tf.reshape(tf.cast(ids, tf.int32), [batch, count, -1])


def phrases_met(
    token_ids: tf.Tensor, lengths: tf.Tensor, phrases: tf.Tensor
) -> tf.Tensor:
    """bool ``[batch, count]``: is phrase ``c`` (ids ``[batch, count, length]``,
    0 after it; all zeros: none) a contiguous part of output ``b``
    (``token_ids[b, :lengths[b]]``)? `strategies.constrained.unmet_phrases`
    as ops."""
    width, length = tf.shape(token_ids)[1], tf.shape(phrases)[2]
    # (width, length): output position s + j of window s, phrase token j.
    position = tf.range(width)[:, None] + tf.range(length)[None]
    windows = tf.gather(token_ids, tf.minimum(position, width - 1), axis=1)
    inside = position[None] < lengths[:, None, None]  # (batch, width, length)
    equal = tf.equal(windows[:, None], phrases[:, :, None])  # (b, c, s, j)
    real = tf.not_equal(phrases, PAD_ID)[:, :, None]
    matches = tf.reduce_all(~real | (equal & inside[:, None]), axis=-1)
    return tf.reduce_any(matches, axis=-1)


def _add_constrained_endpoint(
    archive: keras.export.ExportArchive,
    model: keras.Model,
    tokenizer: SubwordTokenizer,
    settings: ExportSettings,
) -> None:
    """``translate_constrained(sentences [batch], phrases [batch, count])``:
    ``translations``, ``scores`` and ``unmet`` (bool ``[batch, count]``, true
    for a non-empty phrase its translation misses): constrained beam search
    (`ConstrainedBeamSearch`) with the export's settings."""
    decoder, length = Decoder(model), settings.max_output_length

    def translate_constrained(sentences: tf.Tensor, phrases: tf.Tensor) -> Any:
        sentences = check_sentence_batch(sentences)
        source, is_empty = source_ids_from_strings(
            tokenizer, sentences, settings.decode.max_input_length
        )
        phrase_ids = phrase_ids_from_strings(tokenizer, phrases)
        source_lengths = tf.reduce_sum(tf.cast(source != PAD_ID, tf.int32), 1)
        limits = tf.minimum(source_lengths + settings.decode.extra_length, length)
        token_ids, scores, lengths = decoder.search(
            source,
            tf.where(is_empty, 0, limits),
            settings.decode,
            max_length=length,
            start_id=settings.start_id,
            end_id=settings.end_id,
            constraints=phrase_ids,
        )
        width = tf.maximum(tf.reduce_max(tf.concat([lengths, [0]], 0)), 1)
        given = tf.reduce_any(tf.not_equal(phrase_ids, PAD_ID), axis=-1)
        return {
            "translations": tokenizer.detokenize(token_ids[:, :width]),
            "scores": tf.identity(scores),
            "unmet": given & ~phrases_met(token_ids, lengths, phrase_ids),
        }

    archive.add_endpoint(
        CONSTRAINED_SIGNATURE,
        translate_constrained,
        [
            tf.TensorSpec([None], tf.string, name=INPUT_NAME),
            tf.TensorSpec([None, None], tf.string, name=PHRASES_NAME),
        ],
    )
