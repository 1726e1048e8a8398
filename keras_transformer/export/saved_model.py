"""A trained run as one self-contained SavedModel, for each kind of run.

`export_run(workdir, export_dir)` (``keras-transformer export``) reads the
run's kind and writes its SavedModel (`RUN_EXPORTS`): a translation run's
translates raw strings (below), a classification run's classifies raw
reviews (`export_classifier`), an image run's completes images from their
top rows (`export_image_completer`). All three go through one writer (the
swap-in folder, the lock, ``overwrite``; see below).

The translation SavedModel (§6.1):

`export_translator(model, tokenizer, export_dir)` writes a TensorFlow
SavedModel whose graph does the whole job: SentencePiece tokenization
(``tensorflow_text.SentencepieceTokenizer``), the paper's beam search ("beam
size of 4 and length penalty alpha = 0.6 ... maximum output length ...
input length + 50, but terminate early when possible", Vaswani et al. 2017,
§6.1) and detokenization. It loads with ``tf.saved_model.load`` in a process
that imports only ``tensorflow`` and ``tensorflow_text`` (for the
SentencePiece op), and TensorFlow Serving serves it as it is.

With ``jit_compile=True`` (``keras-transformer export --jit-compile``) a call
with one sentence runs its search compiled with XLA: the same translations
at a fraction of the single-sentence latency, a compilation of a few seconds
at the first call of each of two source widths (`SINGLE_SENTENCE_WIDTHS`),
and TensorFlow Serving then needs ``--xla_cpu_compilation_enabled=true``.
Batches of several sentences run the same graph either way.

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

Next to the SavedModel the export folder holds ``model.keras`` (the Keras
model, to train further or evaluate; loading it needs this package),
``tokenizer/`` (`SubwordTokenizer.save`) and ``export.json`` (the settings).

The folder appears whole or not at all: everything is written into a hidden
temporary folder beside it (``.tmp-<pid>-<name>``) and swapped in by one
rename when complete (`keras_transformer.files.atomic_directory`), so a
crash, a kill or a full disk leaves the previous export (or none) intact,
never half of one; TensorFlow Serving, which watches the numbered folders,
sees the old version or the new one. One export into a folder at a time:
the writer lock is the hidden file ``.<name>.lock`` beside the folder.
``overwrite`` replaces only an earlier export of the same format; any other
non-empty folder (a run folder, another format's export, someone's files)
is refused and never deleted. The LiteRT and CTranslate2 exports write their
folders through the same check, lock and swap (`ExportFormat`,
`check_export_target`, `writing_export`).

The folder layout and `is_export_dir` / `load_export` (reading it back)
live in `keras_transformer.runs`, below the translator that also reads it;
they stay importable from here. The ``keras-transformer export`` command is
`keras_transformer.cli.export`.

Example:
>>> from keras_transformer import export
>>> from keras_transformer.runs import RunFolder
>>> model, tokenizer = RunFolder("runs/de_en").load()  # doctest: +SKIP
>>> export.export_translator(model, tokenizer, "exported/de_en/1")  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2

from keras_transformer import validation
from keras_transformer.conventions import DEFAULT_MAX_INPUT_LENGTH, PAD_ID
from keras_transformer.data.batching import encode_sources
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.decoding import Decoder, DecodeSettings
from keras_transformer.decoding.settings import (
    default_setting,
    settings_with,
)
from keras_transformer.files import (
    TEMPORARY_PREFIX,
    FolderLock,
    as_os_error,
    atomic_directory,
    check_free_space,
)
from keras_transformer.image_sampling import ImageSampler
from keras_transformer.layers.pixel_outputs import check_temperature
from keras_transformer.models.transformer import TransformerStack
from keras_transformer.runs import (
    EXPORT_INFO_FILE,
    EXPORT_MODEL_FILE,
    TOKENIZER_DIR,
    RunFolder,
    is_export_dir,
    is_run_dir,
    load_export,
    weights_nbytes,
)

__all__ = [
    "CLASSIFY_SIGNATURE",
    "COMPLETE_SIGNATURE",
    "DEFAULT_MAX_INPUT_LENGTH",
    "IDS_SIGNATURE",
    "RUN_EXPORTS",
    "TRANSLATE_SIGNATURE",
    "SAVED_MODEL",
    "ExportFormat",
    "ExportSettings",
    "check_export_target",
    "check_sentence_batch",
    "checked_shape",
    "default_given_rows",
    "export_classifier",
    "export_image_completer",
    "export_run",
    "export_translator",
    "is_export_dir",
    "load_export",
    "lock_path",
    "run_kind",
    "save_model_and_tokenizer",
    "source_ids_from_strings",
    "writing_export",
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
#: The signature of a classification export, and the name of its input.
CLASSIFY_SIGNATURE = "classify"
TEXTS_NAME = "texts"
#: The signature of an image export.
COMPLETE_SIGNATURE = "complete"
#: The settings a translation export takes: the `DecodeSettings` fields.
SEARCH_SETTINGS = tuple(field.name for field in dataclasses.fields(DecodeSettings))
MODEL_FILE = EXPORT_MODEL_FILE
INFO_FILE = EXPORT_INFO_FILE
_SAVED_MODEL_FILES = ("saved_model.pb", "fingerprint.pb", "variables", "assets")
#: Everything `export_translator` writes into the folder.
_EXPORT_ENTRIES = (*_SAVED_MODEL_FILES, MODEL_FILE, TOKENIZER_DIR, INFO_FILE)
_FORMAT_VERSION = 1
#: The start of the message of a refused input shape.
BATCH_SHAPE_MESSAGE = "expected a 1-D batch of strings, shape [batch]; got shape"


@dataclasses.dataclass(frozen=True)
class ExportSettings:
    """The decoding settings baked into an exported translator.

    ``export.json`` holds them flat: the `DecodeSettings` fields (``method``,
    ``beam_size``, ``alpha``, ``max_input_length``, ``extra_length``, ...)
    and the others below. Exports written before these names call
    ``extra_length`` ``max_output_extra`` and ``alpha`` ``length_penalty``.

    Attributes:
        decode: the decoding settings (§6.1: beam 4, alpha 0.6, +50); a
            beam of one exports greedy decoding.
        max_output_length: the static bound on every output (and the size of
            the decoder caches): ``max_input_length + extra_length``,
            capped by the model's learned target positions.
        vocabulary_size: the tokenizer's number of ids.
        tokenizer_fingerprint: `SubwordTokenizer.fingerprint`.
        start_id, end_id: the special ids of the tokenizer.
        jit_compile: whether a call of one sentence runs the search
            compiled with XLA (`SINGLE_SENTENCE_WIDTHS`).
    """

    decode: DecodeSettings
    max_output_length: int
    vocabulary_size: int
    tokenizer_fingerprint: str
    start_id: int = SubwordTokenizer.START_ID
    end_id: int = SubwordTokenizer.END_ID
    jit_compile: bool = False

    def to_dict(self) -> dict[str, Any]:
        values = dataclasses.asdict(self)
        return {"format_version": _FORMAT_VERSION, **values.pop("decode"), **values}


# ------------------------------------------------------------------ checks
def _learned_positions(layer: keras.layers.Layer) -> int | None:
    """The number of positions of a `PositionEmbedding`; None for sinusoids."""
    return getattr(layer, "max_length", None)


def _settings(
    model: keras.Model,
    tokenizer: SubwordTokenizer,
    settings: DecodeSettings | None,
    changes: dict[str, Any],
    jit_compile: bool = False,
) -> ExportSettings:
    """Validates the arguments of `export_translator`; returns the settings.

    Without a `max_input_length` (in `settings` or `changes`) the default is
    capped at the model's learned source positions.
    """
    if not isinstance(model, keras.Model):
        raise TypeError(
            "export_translator needs the Keras model from build_transformer (or "
            f"load_trained_model). Received: {type(model).__name__}"
        )
    if not isinstance(tokenizer, SubwordTokenizer):
        raise TypeError(
            "export_translator needs the SubwordTokenizer the model was trained "
            f"with. Received: {type(tokenizer).__name__}. Load it with "
            "SubwordTokenizer.load('<workdir>/tokenizer')."
        )
    parts = TransformerStack.of(model)  # ValueError for other models
    vocabulary = parts.target_embedding.vocabulary_size
    tokenizer.check_compatible(expected_vocabulary_size=vocabulary)
    source_positions = _learned_positions(parts.source_position)
    target_positions = _learned_positions(parts.target_position)
    changes = dict(changes)
    if changes.get("max_input_length") is None:  # not given (None: the default)
        changes.pop("max_input_length", None)
        if settings is None:
            default = default_setting("max_input_length")
            limits = (default, source_positions or math.inf)
            changes["max_input_length"] = min(limits)
    decode = settings_with(settings, changes)
    max_input_length = decode.max_input_length
    if source_positions is not None and max_input_length > source_positions:
        raise ValueError(
            f"max_input_length={max_input_length} is longer than the model's "
            f"learned source positions ({source_positions}). Pass "
            f"max_input_length <= {source_positions}."
        )
    validation.check_bool("jit_compile", jit_compile)
    max_output_length = max_input_length + decode.extra_length
    if target_positions is not None:
        max_output_length = min(max_output_length, target_positions)
    return ExportSettings(
        decode=decode,
        max_output_length=max_output_length,
        vocabulary_size=tokenizer.vocabulary_size,
        tokenizer_fingerprint=tokenizer.fingerprint,
        jit_compile=jit_compile,
    )


# -------------------------------------------------------------- the graph
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


#: Source widths of the XLA-compiled searches of one sentence per call
#: (`export_translator(jit_compile=True)`): a source is padded to the first
#: width that holds it, or to `max_input_length`, and its search is sized
#: for that width + `extra_length`; so at most two programs are compiled,
#: each at its first call. XLA needs static shapes; at one sentence per call
#: the graph's per-op cost, not the arithmetic, is what the search spends
#: (`benchmarks/serve.py`), and XLA removes most of it.
SINGLE_SENTENCE_WIDTHS = (32,)


def _single_sentence_search(
    decoder: Decoder, settings: ExportSettings
) -> Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, ...]]:
    """`(source_ids (1, width), limits (1,)) -> Decoder.search outputs`
    (`max_output_length` wide), searched with static shapes under XLA."""
    max_input = settings.decode.max_input_length
    widths = sorted({w for w in SINGLE_SENTENCE_WIDTHS if w < max_input} | {max_input})
    length = settings.max_output_length

    def compiled(width: int) -> Callable[[tf.Tensor, tf.Tensor], Any]:
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
            source = tf.pad(source, [[0, 0], [0, width - tf.shape(source)[1]]])
            token_ids, scores, lengths = jitted(
                tf.reshape(source, [1, width]), tf.reshape(limits, [1])
            )
            padding = [[0, 0], [0, length - max_length]]
            return tf.pad(token_ids, padding), scores, lengths

        return search

    searches = [compiled(width) for width in widths]

    def search(source: tf.Tensor, limits: tf.Tensor) -> tuple[tf.Tensor, ...]:
        width = tf.shape(source)[1]
        branch = tf.reduce_sum(tf.cast(tf.constant(widths[:-1]) < width, tf.int32))
        return tf.switch_case(branch, [lambda f=f: f(source, limits) for f in searches])

    return search


def _either_search(
    decoder: Decoder,
    single: Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, ...]],
    settings: ExportSettings,
    source: tf.Tensor,
    limits: tf.Tensor,
) -> tuple[tf.Tensor, ...]:
    """The XLA search of `single` for one sentence, the graph's for a batch.

    Both run, one of them on no rows: the graph search on every row unless
    there is one, the compiled one (in an `If` whose branches stay functions,
    `_functional_cond`) on the one row or on none; their outputs are
    stacked. A `tf.cond` between the two searches ran the graph search as
    a function called at every step (its loop not lowered: 1.3x slower) or,
    lowered, let Grappler's constant folding give it the compiled search's
    batch of 1.
    """
    batch = tf.shape(source)[0]
    is_single = tf.equal(batch, 1)
    rows = tf.where(is_single, 0, batch)
    graph_outputs = decoder.search(
        source[:rows],
        limits[:rows],
        settings.decode,
        max_length=settings.max_output_length,
        start_id=settings.start_id,
        end_id=settings.end_id,
    )

    def nothing() -> tuple[tf.Tensor, ...]:
        return (
            tf.zeros([0, settings.max_output_length], tf.int32),
            tf.zeros([0], tf.float32),
            tf.zeros([0], tf.int32),
        )

    single_outputs = _functional_cond(
        is_single, lambda: single(source, limits), nothing
    )
    return tuple(
        tf.concat([a, b], 0) for a, b in zip(graph_outputs, single_outputs, strict=True)
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
    if prefix is None and n_best is None:
        return decoder.search(source, limits, settings.decode, **options)
    return decoder.search_with(
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
    single = (
        _single_sentence_search(decoder, settings) if settings.jit_compile else None
    )

    def decode(sentences: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        if single is None:
            token_ids, scores, lengths = _search_graph(
                decoder, tokenizer, settings, sentences
            )
        else:
            token_ids, scores, lengths = _either_search(
                decoder,
                single,
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


@dataclasses.dataclass(frozen=True)
class ExportFormat:
    """What marks a folder as an export of one format, and what it writes.

    Every export format (the SavedModel, `keras_transformer.litert`,
    `keras_transformer.ctranslate2`) writes its folder through
    `check_export_target` and `writing_export`: one check of the target, one
    lock, one swap. ``overwrite`` replaces only a folder that holds an
    export of the same format (all of `marks`); any other non-empty folder
    (a run folder, another format's export, someone's files) is refused,
    never deleted.

    Attributes:
        name: the format's name in messages (``"SavedModel"``).
        marks: the files that every export of this format holds.
        entries: everything the export writes into its folder; what else
            an earlier export's folder holds is carried over into the new one.
        new_folder: what to choose instead of an occupied folder.
    """

    name: str
    marks: tuple[str, ...]
    entries: tuple[str, ...]
    new_folder: str = "a new or empty folder"

    def holds_export(self, folder: Path) -> bool:
        """Whether `folder` holds an export of this format (all its marks)."""
        return all((folder / mark).is_file() for mark in self.marks)


#: The SavedModel of `export_translator`, `export_classifier` and
#: `export_image_completer`.
SAVED_MODEL = ExportFormat(
    "SavedModel",
    ("saved_model.pb",),
    _EXPORT_ENTRIES,
    "a new or empty folder (e.g. the next version number for TensorFlow Serving)",
)


def lock_path(export_dir: str | os.PathLike[str]) -> Path:
    """The writer lock of an export folder: ``.<name>.lock`` beside it.

    Outside the folder, so that the folder swapped in holds only the export
    (TensorFlow Serving ignores the hidden, non-numeric name in the model's
    base folder).
    """
    export_dir = Path(export_dir)
    return export_dir.parent / f".{export_dir.name}.lock"


def _check_target(
    export_dir: Path, overwrite: bool, export_format: ExportFormat
) -> None:
    """Refuses a file, or a non-empty folder that is not to be replaced.

    Deletes nothing: the earlier export is replaced by the swap at the end.
    """
    if export_dir.name.startswith(TEMPORARY_PREFIX):
        raise FileExistsError(
            f"{export_dir} is the name of an unfinished export's temporary folder; "
            "choose another folder name."
        )
    if export_dir.exists() and not export_dir.is_dir():
        raise FileExistsError(
            f"{export_dir} is a file; pass the path of a (new) folder to export to."
        )
    if not export_dir.is_dir():
        return
    if Path.cwd().resolve().is_relative_to(export_dir.resolve()):
        raise FileExistsError(
            f"{export_dir} is (or holds) the current folder, which the export "
            "would replace; run the command from another folder."
        )
    if not any(export_dir.iterdir()):
        return
    name = export_format.name
    if not overwrite:
        raise FileExistsError(
            f"{export_dir} is not empty. Pass overwrite=True (--overwrite) to "
            f"replace an earlier {name} export there, or choose "
            f"{export_format.new_folder}."
        )
    if not export_format.holds_export(export_dir):
        raise FileExistsError(
            f"{export_dir} is not empty and holds no {name} export to replace "
            f"({' and '.join(export_format.marks)}): refusing to delete it. "
            f"Choose {export_format.new_folder}."
        )


def check_export_target(
    export_dir: str | os.PathLike[str],
    overwrite: bool,
    export_format: ExportFormat = SAVED_MODEL,
) -> Path:
    """`export_dir` as a named `Path`, checked as a target of `export_format`.

    For the check before the (slow) conversion; `writing_export` checks
    again under the lock. Deletes nothing.

    Raises:
        FileExistsError: (one line) when `export_dir` is a file, the
            current folder, or not empty and either `overwrite` is false or
            it holds no export of `export_format`.
    """
    export_dir = Path(export_dir)
    if export_dir.name in ("", ".", ".."):  # the swap needs the folder's name
        export_dir = Path(os.path.abspath(export_dir))
    _check_target(export_dir, overwrite, export_format)
    return export_dir


def _carry_over(old: Path, new: Path, entries: tuple[str, ...]) -> None:
    """Copies what else an earlier export folder holds into the new one.

    Files someone put beside an earlier export (notes, a README) were kept
    when exports were overwritten in place; the swap keeps them too.
    """
    if not old.is_dir():
        return
    for entry in old.iterdir():
        if entry.name in entries or (new / entry.name).exists():
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.copytree(entry, new / entry.name, symlinks=True)
        else:
            shutil.copy2(entry, new / entry.name, follow_symlinks=False)


@contextlib.contextmanager
def writing_export(
    export_dir: Path, overwrite: bool, export_format: ExportFormat = SAVED_MODEL
) -> Iterator[Path]:
    """The one writer of every export format: yields the folder to write.

    Takes the writer lock (`lock_path`), checks `export_dir` again now that
    no one else writes, and yields a temporary folder beside it; when the
    block ends, what else an earlier export's folder held is carried over,
    its permissions copied, and the new folder swapped in whole
    (`keras_transformer.files.atomic_directory`). A failure leaves the
    earlier export (or nothing) as it was.

    Raises:
        FileExistsError: as `check_export_target`.
        keras_transformer.files.FolderLockedError: when another export into
            `export_dir` is running.
        keras_transformer.files.FileWriteError: when a write fails.
    """
    with FolderLock(export_dir, "keras-transformer export", lock_path(export_dir)):
        _check_target(export_dir, overwrite, export_format)
        # Written beside export_dir and swapped in when complete: the earlier
        # export (or nothing) until then, whatever happens.
        with atomic_directory(export_dir) as temporary:
            yield temporary
            _carry_over(export_dir, temporary, export_format.entries)
            if export_dir.is_dir():  # the earlier folder's permissions
                shutil.copymode(export_dir, temporary)


def _needed_bytes(model: keras.Model) -> int:
    """About what an export of `model` takes on disk: the weights twice."""
    # The SavedModel's variables, model.keras, and 1 MiB for the rest.
    return 2 * weights_nbytes(model) + 2**20


@contextlib.contextmanager
def _file_errors() -> Iterator[None]:
    """TensorFlow's failed writes as `OSError`, for `atomic_directory`."""
    try:
        yield
    except tf.errors.OpError as e:
        raise as_os_error(e) from e


def save_model_and_tokenizer(
    model: keras.Model,
    tokenizer: SubwordTokenizer | None,
    directory: str | os.PathLike[str],
) -> Path:
    """Writes ``model.keras`` and ``tokenizer/`` into `directory`.

    The pair `load_export` reads back (the export folder's copy for further
    training or evaluation); only ``model.keras`` for a model without a
    tokenizer (images).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.save(directory / MODEL_FILE)
    if tokenizer is not None:
        tokenizer.save(directory / TOKENIZER_DIR)
    return directory


def _translate_archive(
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
        token_ids, scores, lengths = decoder.constrained_search(
            source,
            tf.where(is_empty, 0, limits),
            phrase_ids,
            settings.decode,
            max_length=length,
            start_id=settings.start_id,
            end_id=settings.end_id,
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


def _target(
    export_dir: str | os.PathLike[str], model: keras.Model, overwrite: bool
) -> Path:
    """`export_dir` as a named `Path`, checked before the (slow) tracing."""
    export_dir = check_export_target(export_dir, overwrite)  # fail fast
    check_free_space(export_dir, _needed_bytes(model))
    return export_dir


def _write_export(
    archive: keras.export.ExportArchive,
    model: keras.Model,
    tokenizer: SubwordTokenizer | None,
    info: dict[str, Any],
    export_dir: Path,
    overwrite: bool,
) -> None:
    """Writes the folder beside `export_dir` and swaps it in, under its lock.

    The one writer of every kind's export: the SavedModel of `archive`,
    ``model.keras`` (and ``tokenizer/``), and ``export.json`` (`info`).
    """
    with writing_export(export_dir, overwrite) as temporary, _file_errors():
        archive.write_out(str(temporary), verbose=False)
        save_model_and_tokenizer(model, tokenizer, temporary)
        (temporary / INFO_FILE).write_text(
            json.dumps(info, indent=2) + "\n", encoding="utf-8"
        )


def export_translator(
    model: keras.Model,
    tokenizer: SubwordTokenizer,
    export_dir: str | os.PathLike[str],
    settings: DecodeSettings | None = None,
    *,
    overwrite: bool = False,
    jit_compile: bool = False,
    **decode_settings: Any,
) -> Path:
    """Writes a SavedModel translating raw strings, plus the Keras model.

    Tokenization, the paper's beam search (§6.1: beam 4, alpha 0.6, outputs
    up to the input length + 50) and detokenization all run in the graph,
    so the SavedModel needs only ``tensorflow`` and ``tensorflow_text``. See
    the module docstring for the signatures and the input rules.

    Args:
        model: a model from `build_transformer` (or `load_trained_model`).
        tokenizer: the `SubwordTokenizer` it was trained with.
        export_dir: the folder to write (for TensorFlow Serving, a numbered
            version folder such as ``exported/de_en/1``).
        settings: the `DecodeSettings` to bake in (a beam of one exports
            greedy decoding). Without one, `max_input_length` defaults to
            128, or the model's learned source positions if fewer.
        overwrite: replace an earlier export in `export_dir`; it stays
            whole until the new one is complete, then the two are swapped.
        jit_compile: run the search of a call with one sentence compiled
            with XLA (`SINGLE_SENTENCE_WIDTHS`): the same translations, at a
            fraction of the latency (docs/export.md). Each of its two
            programs is compiled at its first call (seconds). TensorFlow
            Serving runs XLA-compiled functions only with its flag
            ``--xla_cpu_compilation_enabled=true``; without `jit_compile`
            the SavedModel needs no flag.
        **decode_settings: `DecodeSettings` fields replacing those of
            `settings` (``beam_size``, ``alpha``, ``max_input_length``,
            ``extra_length``).

    Returns:
        The export folder.

    Raises:
        ValueError: on a bad setting or a tokenizer whose vocabulary size
            differs from the model's.
        FileExistsError: when `export_dir` is a file, or is not empty and
            `overwrite` is false, or holds something other than an earlier
            export (never deleted).
        keras_transformer.files.FolderLockedError: when another export
            into `export_dir` is running.
        keras_transformer.files.FileWriteError: when the disk is full (or
            another write fails); the earlier export, if any, is intact.

    Reference: Vaswani et al. (2017), §6.1; Wu et al. (2016), Eq. 14.
    """
    export_settings = _settings(
        model, tokenizer, settings, decode_settings, jit_compile
    )
    export_dir = _target(export_dir, model, overwrite)
    archive = _translate_archive(model, tokenizer, export_settings)
    info = export_settings.to_dict()
    _write_export(archive, model, tokenizer, info, export_dir, overwrite)
    return export_dir


# ------------------------------------------------------------ classification
def _embedding_vocabulary(model: keras.Model) -> int | None:
    """The number of ids of a classifier's token embedding (None: not found)."""
    for layer in model.layers:
        if isinstance(getattr(layer, "vocabulary_size", None), int):
            return layer.vocabulary_size
    return None


def _classify_archive(
    model: keras.Model, tokenizer: SubwordTokenizer, info: dict[str, Any]
) -> keras.export.ExportArchive:
    """The SavedModel's endpoint `classify`: reviews -> probabilities, labels."""
    from keras_transformer.training.classification import cut_review_ids

    def classify(texts: tf.Tensor) -> dict[str, tf.Tensor]:
        texts = checked_shape(texts, [None], BATCH_SHAPE_MESSAGE)
        if info["lowercase"]:
            texts = tf.strings.lower(texts, encoding="utf-8")
        ids = cut_review_ids(
            tokenizer.tokenize(texts), info["max_length"], info["tail_tokens"]
        )
        # (batch, 1): P(positive), as the classifier computes it in training.
        positive = model(ids.to_tensor(PAD_ID), training=False)[:, 0]
        positive = tf.cast(positive, tf.float32)
        return {
            "probabilities": tf.stack([1.0 - positive, positive], axis=1),
            "labels": tf.cast(positive > 0.5, tf.int32),
        }

    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.track(tokenizer)
    spec = [tf.TensorSpec([None], tf.string, name=TEXTS_NAME)]
    archive.add_endpoint(CLASSIFY_SIGNATURE, classify, spec)
    return archive


def export_classifier(
    model: keras.Model,
    tokenizer: SubwordTokenizer,
    export_dir: str | os.PathLike[str],
    *,
    max_length: int,
    tail_tokens: int = 128,
    lowercase: bool = True,
    overwrite: bool = False,
) -> Path:
    """Writes a SavedModel classifying raw reviews, plus the Keras model.

    The signature ``classify`` (also ``serving_default``) takes ``texts``,
    ``tf.string`` ``[batch]``, and returns ``probabilities`` (float32
    ``[batch, 2]``: P(negative), P(positive)) and ``labels`` (int32
    ``[batch]``: 1 where P(positive) > 0.5). The graph reads a review as
    training did: lowercased (when the run lowercased), tokenized by the
    run's tokenizer, cut by `training.classification.cut_review_ids`. It
    loads with ``tf.saved_model.load`` and ``tensorflow_text`` alone.

    Args:
        model: a model from `build_classifier` (a classification run's).
        tokenizer: the `SubwordTokenizer` it was trained with.
        export_dir: the folder to write (e.g. ``exported/imdb/1``).
        max_length: ``data.max_sentence_length`` of the run.
        tail_tokens: ``classification.tail_tokens`` of the run.
        lowercase: ``classification.lowercase`` of the run.
        overwrite: replace an earlier export in `export_dir` (swapped in
            whole, as `export_translator` does).

    Returns:
        The export folder.

    Raises:
        TypeError, ValueError: on another model, another tokenizer or a bad
            setting; FileExistsError, FolderLockedError, FileWriteError as
            `export_translator`.
    """
    if not isinstance(model, keras.Model) or tuple(model.output.shape[1:]) != (1,):
        raise TypeError(
            "export_classifier needs the Keras model of build_classifier "
            f"(P(positive), shape (batch, 1)). Received: {type(model).__name__}"
        )
    if not isinstance(tokenizer, SubwordTokenizer):
        raise TypeError(
            "export_classifier needs the SubwordTokenizer the model was trained "
            f"with. Received: {type(tokenizer).__name__}."
        )
    tokenizer.check_compatible(expected_vocabulary_size=_embedding_vocabulary(model))
    validation.check_int("max_length", max_length, 1)
    validation.check_int("tail_tokens", tail_tokens, 0)
    validation.check_bool("lowercase", lowercase)
    info = {
        "format_version": _FORMAT_VERSION,
        "kind": "classification",
        "max_length": max_length,
        "tail_tokens": tail_tokens,
        "lowercase": lowercase,
        "vocabulary_size": tokenizer.vocabulary_size,
        "tokenizer_fingerprint": tokenizer.fingerprint,
    }
    export_dir = _target(export_dir, model, overwrite)
    archive = _classify_archive(model, tokenizer, info)
    _write_export(archive, model, tokenizer, info, export_dir, overwrite)
    return export_dir


# ---------------------------------------------------------- image completion
def default_given_rows(model: keras.Model) -> int:
    """Half the image's rows, whole rows of query blocks in the block order."""
    stack = ImageSampler(model).stack
    given_rows = stack.image_shape[0] // 2
    blocks = stack.generation_query_block
    return given_rows - (given_rows % blocks[0] if blocks else 0)


def _check_given_rows(sampler: ImageSampler, given_rows: int) -> None:
    """Refuses rows the sampler cannot take as the first generated (§3.2)."""
    height = sampler.image_shape[0]
    validation.check_int("given_rows", given_rows, 0)
    blocks = sampler.stack.generation_query_block
    step = blocks[0] if blocks else 1
    if given_rows > height or given_rows % step:
        raise ValueError(
            f"given_rows must be from 0 to the image height {height}"
            + (f" and a multiple of the query block's height {step}" if blocks else "")
            + f" (the rows generated first). Received: given_rows={given_rows}."
        )


def _complete_archive(
    model: keras.Model, info: dict[str, Any]
) -> keras.export.ExportArchive:
    """The SavedModel's endpoint `complete`: top rows, seed -> images."""
    sampler = ImageSampler(model)
    height, width, channels = sampler.image_shape
    given, conditional = info["given_rows"], info["conditional"]
    rows_message = (
        f"expected the top rows, uint8 of shape [batch, {given}, {width}, "
        f"{channels}]; got shape"
    )

    def complete(top_rows: tf.Tensor, seed: tf.Tensor, *labels: tf.Tensor) -> Any:
        top_rows = checked_shape(top_rows, [None, given, width, channels], rows_message)
        message = "expected one integer seed, shape []; got shape"
        seed = tf.reshape(checked_shape(seed, [], message), [])
        images = tf.pad(
            tf.cast(top_rows, tf.int32), [[0, 0], [0, height - given], [0, 0], [0, 0]]
        )
        if conditional:
            batch = tf.shape(top_rows)[:1]
            message = "expected one label per image, shape [batch]; got shape"
            labels = (checked_shape(labels[0], [None], message),)
            check = tf.debugging.assert_equal(tf.shape(labels[0]), batch, message)
            with tf.control_dependencies([check]):
                images = tf.identity(images)
        completed = sampler.complete_tensor(
            images, given, info["temperature"], seed, *labels
        )
        return {"images": tf.cast(completed, tf.uint8)}

    spec = [
        tf.TensorSpec([None, given, width, channels], tf.uint8, name="top_rows"),
        # Of any shape, checked in the graph: a declared [] would let the
        # optimizer fold the check away (`check_sentence_batch`).
        tf.TensorSpec(None, tf.int64, name="seed"),
    ]
    if conditional:
        spec.append(tf.TensorSpec([None], tf.int32, name="labels"))
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(COMPLETE_SIGNATURE, complete, spec)
    return archive


def export_image_completer(
    model: keras.Model,
    export_dir: str | os.PathLike[str],
    *,
    given_rows: int | None = None,
    temperature: float = 1.0,
    overwrite: bool = False,
) -> Path:
    """Writes a SavedModel completing images from their top rows (§5, Figure 1).

    The signature ``complete`` (also ``serving_default``) takes
    ``top_rows``, uint8 ``[batch, given_rows, width, channels]``, and
    ``seed``, an int64 scalar (and ``labels``, int32 ``[batch]``, for a
    class-conditional model); it returns ``images``, uint8 ``[batch,
    height, width, channels]``: the given rows unchanged, the rest drawn at
    `temperature` in the model's generation order by
    `image_sampling.ImageSampler` (the same draws as ``ImageSampler(model)
    .complete(images, given_rows, temperature, seed)`` in Python). It loads
    with ``tf.saved_model.load`` alone.

    Args:
        model: a model from `build_image_transformer` (an image run's).
        export_dir: the folder to write.
        given_rows: the rows given (default: half the image; in the block
            order whole rows of query blocks, §3.2).
        temperature: 1 samples the model, 0 takes the most likely values.
        overwrite: replace an earlier export in `export_dir`.

    Returns:
        The export folder.

    Raises:
        ValueError: on a bad `given_rows` or `temperature`, or another model;
            FileExistsError, FolderLockedError, FileWriteError as
            `export_translator`.
    """
    sampler = ImageSampler(model)  # ValueError for other models
    if given_rows is None:
        given_rows = default_given_rows(model)
    _check_given_rows(sampler, given_rows)
    info = {
        "format_version": _FORMAT_VERSION,
        "kind": "image",
        "given_rows": given_rows,
        "temperature": check_temperature(temperature),
        "image_shape": list(sampler.image_shape),
        "conditional": sampler.stack.embedding.num_classes is not None,
    }
    export_dir = _target(export_dir, model, overwrite)
    archive = _complete_archive(model, info)
    _write_export(archive, model, None, info, export_dir, overwrite)
    return export_dir


# ------------------------------------------------------------ a run's export
def run_kind(workdir: str | os.PathLike[str]) -> str:
    """The kind of a run folder (its ``config.json``) or of an export folder
    (its ``export.json``); translation when neither says."""
    if is_run_dir(workdir):
        return RunFolder(workdir).kind()
    info = Path(workdir) / INFO_FILE
    if is_export_dir(workdir) and info.is_file():
        return str(
            json.loads(info.read_text(encoding="utf-8")).get("kind", "translation")
        )
    return "translation"


def _export_translation(
    workdir: Path, weights: str, export_dir: Path, overwrite: bool, **settings: Any
) -> Path:
    from keras_transformer.translation import load_translator

    model, tokenizer = load_translator(workdir, weights)
    return export_translator(
        model, tokenizer, export_dir, overwrite=overwrite, **settings
    )


def _export_classification(
    workdir: Path, weights: str, export_dir: Path, overwrite: bool
) -> Path:
    if is_run_dir(workdir):
        from keras_transformer.training.checkpoints import load_stored_config

        folder = RunFolder(workdir)
        model, tokenizer = folder.load(weights)
        config = load_stored_config(folder.config_file)
        settings = {
            "max_length": config.data.max_sentence_length,
            "tail_tokens": config.classification.tail_tokens,
            "lowercase": config.classification.lowercase,
        }
    else:  # an earlier classification export
        model, tokenizer, info = load_export(workdir)
        settings = {k: info[k] for k in ("max_length", "tail_tokens", "lowercase")}
    return export_classifier(
        model, tokenizer, export_dir, overwrite=overwrite, **settings
    )


def _export_image(
    workdir: Path, weights: str, export_dir: Path, overwrite: bool, **settings: Any
) -> Path:
    model, _ = RunFolder(workdir).check().load(weights)
    return export_image_completer(model, export_dir, overwrite=overwrite, **settings)


#: kind -> (the export of a run of that kind, the settings it takes).
RUN_EXPORTS: dict[str, tuple[Callable[..., Path], tuple[str, ...]]] = {
    "translation": (_export_translation, (*SEARCH_SETTINGS, "jit_compile")),
    "classification": (_export_classification, ()),
    "image": (_export_image, ("given_rows", "temperature")),
}


def export_run(
    workdir: str | os.PathLike[str],
    export_dir: str | os.PathLike[str],
    weights: str = "last",
    *,
    overwrite: bool = False,
    **settings: Any,
) -> Path:
    """Exports a run (or re-exports an export) as the SavedModel of its kind.

    ``keras-transformer export``: a translation run's SavedModel translates
    raw strings (`export_translator`), a classification run's classifies raw
    reviews (`export_classifier`), an image run's completes images from
    their top rows (`export_image_completer`).

    Args:
        workdir: a run folder (``keras-transformer train --workdir``) or an
            export folder of a translation or classification run.
        export_dir: the folder to write.
        weights: ``"last"``, ``"best"``, ``"average"`` or a weights file.
        overwrite: replace an earlier SavedModel export in `export_dir`.
        **settings: the kind's settings: the `DecodeSettings` fields for
            translation; ``given_rows`` and ``temperature`` for images;
            none for classification.

    Raises:
        ValueError: for a kind without an export, or a setting the kind
            does not take (one line naming both).
        FileExistsError: (before the model is loaded) when `export_dir` is
            a file or a non-empty folder it may not replace
            (`check_export_target`).
    """
    kind = run_kind(workdir)
    if kind not in RUN_EXPORTS:
        raise ValueError(
            f"Runs of kind {kind!r} cannot be exported; the kinds that can are "
            f"{', '.join(RUN_EXPORTS)}."
        )
    write, takes = RUN_EXPORTS[kind]
    refused = [name for name in settings if name not in takes]
    if refused:
        flags = ", ".join(f"{n} (--{n.replace('_', '-')})" for n in refused)
        offered = ", ".join(takes) if takes else "no settings"
        raise ValueError(
            f"A {kind} export takes no {flags}; it takes {offered}. Leave "
            f"{'it' if len(refused) == 1 else 'them'} out."
        )
    export_dir = check_export_target(export_dir, overwrite)  # before loading
    return write(Path(workdir), weights, export_dir, overwrite, **settings)
