"""A trained run as one self-contained SavedModel, for each kind of run.

`export_run(workdir, export_dir)` (``keras-transformer export``) reads the
run's kind and writes its SavedModel (`RUN_EXPORTS`): a translation run's
translates raw strings (`export_translator`, the graph of
`keras_transformer.export.signatures`), a classification run's classifies
raw reviews (`export_classifier`), an image run's completes images from
their top rows (`export_image_completer`). All three go through one writer
(`keras_transformer.export.target`: the swap-in folder, the lock,
``overwrite``).

Next to the SavedModel the export folder holds ``model.keras`` (the Keras
model, to train further or evaluate; loading it needs this package),
``tokenizer/`` (`SubwordTokenizer.save`) and ``export.json`` (the settings).
The folder layout and `is_export_dir` / `load_export` (reading it back)
live in `keras_transformer.runs`, below the translator that also reads it.

Example:
>>> from keras_transformer import export
>>> from keras_transformer.runs import RunFolder
>>> model, tokenizer = RunFolder("runs/de_en").load()  # doctest: +SKIP
>>> export.export_translator(model, tokenizer, "exported/de_en/1")  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf
from tensorflow.python.saved_model import save_context

from keras_transformer import validation
from keras_transformer.backend import forward_only
from keras_transformer.data.imdb import REVIEW_READING
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.decoding import DecodeSettings
from keras_transformer.export.classification import classify_function, load_classifier
from keras_transformer.export.settings import FORMAT_VERSION, resolve_settings
from keras_transformer.export.signatures import (
    BATCH_SHAPE_MESSAGE,
    checked_shape,
    translate_archive,
)
from keras_transformer.export.target import (
    ExportFormat,
    check_export_target,
    writing_export,
)
from keras_transformer.files import (
    as_os_error,
    check_export_files,
    check_free_space,
    file_checksums,
)
from keras_transformer.image_sampling import ImageSampler
from keras_transformer.layers.pixel_outputs import check_temperature
from keras_transformer.runs import (
    EXPORT_INFO_FILE,
    EXPORT_MODEL_FILE,
    TOKENIZER_DIR,
    RunFolder,
    is_run_dir,
    run_kind,
    weights_nbytes,
)
from keras_transformer.runs.exports import (
    QUANTIZATIONS,
    check_export_weights,
    embedding_vocabulary,
    load_export_model,
    quantized,
    read_export_info,
)

__all__ = [
    "CLASSIFY_SIGNATURE",
    "COMPLETE_SIGNATURE",
    "FORMAT",
    "INFO_FILE",
    "MODEL_FILE",
    "RUN_EXPORTS",
    "default_given_rows",
    "export_classifier",
    "export_image_completer",
    "export_run",
    "export_translator",
    "save_model_and_tokenizer",
]

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


def _target(
    export_dir: str | os.PathLike[str], model: keras.Model, overwrite: bool
) -> Path:
    """`export_dir` as a named `Path`, checked before the (slow) tracing."""
    export_dir = check_export_target(export_dir, overwrite, FORMAT)  # fail fast
    check_free_space(export_dir, _needed_bytes(model))
    return export_dir


def _write_saved_model(
    archive: keras.export.ExportArchive, path: Path, options: tf.saved_model.SaveOptions
) -> None:
    """`archive.write_out(path)`, each endpoint traced once instead of twice.

    Keras lists the variables the endpoints use by tracing them, outside a
    save context; `tf.saved_model.save` then traces them again, inside one,
    because a `tf.function`'s cache key holds the save options' variable
    policy. Listing them inside a save context with the same options lets the
    save reuse those traces (tracing is most of an export's time). With a
    Keras that no longer has that step, `write_out` as it is.
    """
    list_variables = getattr(archive, "_filter_and_track_resources", None)
    if list_variables is None:
        archive.write_out(str(path), options=options, verbose=False)
        return

    def in_save_context() -> None:
        with save_context.save_context(options):
            list_variables()

    archive._filter_and_track_resources = in_save_context
    try:
        archive.write_out(str(path), options=options, verbose=False)
    finally:
        del archive._filter_and_track_resources


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
    with writing_export(export_dir, overwrite, FORMAT) as temporary, _file_errors():
        # No gradient functions: an export serves, nothing differentiates it
        # (tracing them took a sixth of an export's time), and no op that
        # would carry one, which a SavedModel warns about when it is loaded.
        options = tf.saved_model.SaveOptions(experimental_custom_gradients=False)
        with forward_only():
            _write_saved_model(archive, temporary, options)
        save_model_and_tokenizer(model, tokenizer, temporary)
        info = {**info, "file_sha256": file_checksums(temporary, [MODEL_FILE])}
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
    quantization: str = "float32",
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
        jit_compile: run the search of a call with 1 to 4 sentences
            compiled with XLA (`COMPILED_BATCH_SIZES`,
            `COMPILED_SOURCE_WIDTHS`): the same translations, at a fraction
            of the latency (docs/export.md). Each of its programs is
            compiled at its first call (seconds). TensorFlow
            Serving runs XLA-compiled functions only with its flag
            ``--xla_cpu_compilation_enabled=true``; without `jit_compile`
            the SavedModel needs no flag.
        quantization: ``"int8"`` serves the model of
            `runs.exports.quantized` (its feed-forward weights in int8,
            computed in float32); ``model.keras`` holds the float32 model,
            which `translation.load_translator` quantizes the same way.
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
    export_settings = resolve_settings(
        model, tokenizer, settings, decode_settings, jit_compile=jit_compile
    )
    export_dir = _target(export_dir, model, overwrite)
    served = quantized(model, quantization)
    archive = translate_archive(served, tokenizer, export_settings)
    info = {**export_settings.to_dict(), "quantization": quantization}
    # model.keras holds the float32 model: `load_translator` quantizes it again
    # (the same int8 weights: the scales are the weights' absolute maxima).
    _write_export(archive, model, tokenizer, info, export_dir, overwrite)
    return export_dir


# ------------------------------------------------------------ classification
def _classify_archive(
    model: keras.Model, tokenizer: SubwordTokenizer, info: dict[str, Any]
) -> keras.export.ExportArchive:
    """The SavedModel's endpoint `classify`: reviews -> probabilities, labels."""
    read = classify_function(model, tokenizer, info)

    def classify(texts: tf.Tensor) -> dict[str, tf.Tensor]:
        return read(checked_shape(texts, [None], BATCH_SHAPE_MESSAGE))

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
    tail_tokens: int = REVIEW_READING["tail_tokens"],
    lowercase: bool = REVIEW_READING["lowercase"],
    overwrite: bool = False,
) -> Path:
    """Writes a SavedModel classifying raw reviews, plus the Keras model.

    The signature ``classify`` (also ``serving_default``) takes ``texts``,
    ``tf.string`` ``[batch]``, and returns ``probabilities`` (float32
    ``[batch, 2]``: P(negative), P(positive)) and ``labels`` (int32
    ``[batch]``: 1 where P(positive) > 0.5). The graph reads a review as
    training did: lowercased (when the run lowercased), tokenized by the
    run's tokenizer, cut by `data.imdb.cut_review_ids`. It
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
    tokenizer.check_compatible(expected_vocabulary_size=embedding_vocabulary(model))
    validation.check_int("max_length", max_length, 1)
    validation.check_int("tail_tokens", tail_tokens, 0)
    validation.check_bool("lowercase", lowercase)
    info = {
        "format_version": FORMAT_VERSION,
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
        "format_version": FORMAT_VERSION,
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
def _export_translation(
    workdir: Path, weights: str, export_dir: Path, overwrite: bool, **settings: Any
) -> Path:
    from keras_transformer.translation import load_translator
    from keras_transformer.translation.loading import with_export_settings

    settings = with_export_settings(workdir, settings)  # an export keeps its own
    model, tokenizer = load_translator(workdir, weights, as_served=False)
    return export_translator(
        model, tokenizer, export_dir, overwrite=overwrite, **settings
    )


def _export_classification(
    workdir: Path, weights: str, export_dir: Path, overwrite: bool
) -> Path:
    model, tokenizer, settings = load_classifier(workdir, weights)
    return export_classifier(
        model, tokenizer, export_dir, overwrite=overwrite, **settings
    )


def _export_image(
    workdir: Path, weights: str, export_dir: Path, overwrite: bool, **settings: Any
) -> Path:
    if is_run_dir(workdir):
        model, _ = RunFolder(workdir).check().load(weights)
    else:  # an earlier image export: its model, and its settings unless given
        check_export_weights(workdir, weights)
        if not (workdir / MODEL_FILE).is_file():
            raise FileNotFoundError(
                f"{workdir} holds an image export's export.json but no "
                f"{MODEL_FILE}: export its training run again."
            )
        model = load_export_model(workdir / MODEL_FILE)
        info = read_export_info(workdir)
        check_export_files(workdir, info, workdir / INFO_FILE, FORMAT.option)
        settings = {k: info[k] for k in ("given_rows", "temperature") if k in info} | (
            settings
        )
    return export_image_completer(model, export_dir, overwrite=overwrite, **settings)


#: What each kind's SavedModel offers, for the closing line of the command.
_SIGNATURES = {
    "translation": "serving_default and translate (strings -> translations, "
    "scores), translate_ids (strings -> token_ids, lengths, scores), n_best, "
    "score, translate_with_prefix, translate_constrained",
    "classification": "serving_default and classify (texts -> probabilities, labels)",
    "image": "serving_default and complete (top_rows, seed -> images)",
}


def _summary(path: Path, kind: str, quantization: str | None) -> str:
    """The closing line of ``keras-transformer export``."""
    weights = " (feed-forward weights in int8)" if quantization == "int8" else ""
    return (
        f"Exported the {kind} model to {path}{weights}: signatures "
        f"{_SIGNATURES[kind]}; Keras model in {path / MODEL_FILE}. Inspect it "
        f"with: saved_model_cli show --dir {path} --all"
    )


def _load_translator(
    folder: str | os.PathLike[str], weights: str = "last", **settings: Any
) -> Any:
    """The `Translator` of a run folder or of a SavedModel export folder."""
    from keras_transformer.translation import Translator

    return Translator.load(folder, weights, **settings)


#: kind -> (the export of a run of that kind, the settings it takes).
RUN_EXPORTS: dict[str, tuple[Callable[..., Path], tuple[str, ...]]] = {
    "translation": (
        _export_translation,
        (*SEARCH_SETTINGS, "jit_compile", "quantization"),
    ),
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
            f"{validation.with_article(kind).capitalize()} export takes no "
            f"{flags}; it takes {offered}. Leave "
            f"{'it' if len(refused) == 1 else 'them'} out."
        )
    export_dir = check_export_target(export_dir, overwrite, FORMAT)  # before loading
    return write(Path(workdir), weights, export_dir, overwrite, **settings)


#: The SavedModel of `export_translator`, `export_classifier` and
#: `export_image_completer`: the registry's ``savedmodel``.
FORMAT = ExportFormat(
    "SavedModel",
    ("saved_model.pb",),
    _EXPORT_ENTRIES,
    "a new or empty folder (e.g. the next version number for TensorFlow Serving)",
    option="savedmodel",
    kinds=tuple(RUN_EXPORTS),
    quantizations=QUANTIZATIONS,
    export_run=export_run,
    load_translator=_load_translator,
    serves=frozenset({"n_best", "prefixes", "constraints", "ensemble", "progress"}),
    summary=_summary,
)
