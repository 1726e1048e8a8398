"""LiteRT (TFLite): greedy decoding on-device, ids in, ids out.

The SavedModel of `keras_transformer.export.saved_model` tokenizes raw strings in its
graph. The LiteRT converter cannot take that graph with builtin ops only
(TensorFlow 2.20, ai-edge-litert 2.3.0)::

    'tf.TFText>FastSentencepieceTokenize' op is neither a custom op nor a flex op
    'tf.RaggedRange' op is neither a custom op nor a flex op
    'tf.RaggedGather' op is neither a custom op nor a flex op
    'tf.RaggedTensorToTensor' op is neither a custom op nor a flex op

(the tokenizer is a tensorflow-text custom op, the source cut is ragged;
both would need the TensorFlow "select ops", which the ai-edge-litert
interpreter does not run). The search itself converts to builtins,
``WHILE`` included, once the weights are constants and every shape of the
loop is static (`Decoder.search(static_shapes=True)`, the XLA layout; the
layout that drops finished examples changes its cache shapes inside the
loop, which the converter refuses).

So the export is split (`export_litert`):

* ``model.tflite``: source ids ``int32 [batch, length]`` (0-padded, END
  last) -> ``token_ids int32 [batch, max_output_length]`` and ``lengths
  int32 [batch]``: the model's cached greedy search (§6.1's +50 rule inside:
  each limit is ``source length + extra_length``, capped), builtin ops only,
  with int8 dynamic-range weights (``tf.lite.Optimize.DEFAULT``: the
  matrices stored as int8 with a scale per channel, computed in float32) or
  float32 weights;
* ``tokenizer.model``: the SentencePiece model, run outside with the
  ``sentencepiece`` library (it tokenizes as tensorflow-text does);
* ``litert.json``: the settings (``max_input_length``, ``extra_length``,
  ``max_output_length``, the special ids, the quantization).

`LiteRTTranslator` is the documented use of the split: sentencepiece ->
the source-cut rule (first ``max_input_length - 1`` ids, then END) -> the
interpreter -> sentencepiece.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_transformer import validation
from keras_transformer.conventions import PAD_ID
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.decoding import Decoder, DecodeSettings
from keras_transformer.export.settings import (
    FORMAT_VERSION,
    ExportSettings,
    resolve_settings,
)
from keras_transformer.export.target import (
    ExportFormat,
    check_export_target,
    read_export_record,
    reading_export_files,
    writing_export,
)
from keras_transformer.files import check_export_files, check_export_tokenizer
from keras_transformer.source_limits import cut_export_sources, export_cut_remedy

__all__ = [
    "FORMAT",
    "INFO_FILE",
    "MODEL_FILE",
    "QUANTIZATIONS",
    "TOKENIZER_FILE",
    "LiteRTSettings",
    "LiteRTTranslator",
    "convert_greedy",
    "export_litert",
]

MODEL_FILE = "model.tflite"
TOKENIZER_FILE = "tokenizer.model"
INFO_FILE = "litert.json"
#: The weight formats of `export_litert`: int8 dynamic range, or float32.
QUANTIZATIONS = ("int8", "float32")


@dataclasses.dataclass(frozen=True)
class LiteRTSettings:
    """What ``litert.json`` holds: the settings the ``.tflite`` was built with.

    Attributes:
        max_input_length: the longest source in ids, END included.
        extra_length: an output may be this much longer than its source
            (§6.1: +50).
        max_output_length: the static width of the outputs.
        quantization: ``"int8"`` (dynamic range) or ``"float32"``.
        start_id, end_id: the special ids.
        tokenizer_fingerprint: `SubwordTokenizer.fingerprint`.
        learned_source_positions: the model's learned source positions
            (None: sinusoidal ones, or an export written before them).
    """

    max_input_length: int
    extra_length: int
    max_output_length: int
    quantization: str
    start_id: int
    end_id: int
    tokenizer_fingerprint: str
    learned_source_positions: int | None = None

    @classmethod
    def of(cls, export: ExportSettings, quantization: str) -> LiteRTSettings:
        return cls(
            max_input_length=export.decode.max_input_length,
            extra_length=export.decode.extra_length,
            max_output_length=export.max_output_length,
            quantization=quantization,
            start_id=export.start_id,
            end_id=export.end_id,
            tokenizer_fingerprint=export.tokenizer_fingerprint,
            learned_source_positions=export.learned_source_positions,
        )


def _greedy_function(
    model: keras.Model, settings: LiteRTSettings
) -> tf.types.experimental.ConcreteFunction:
    """`source_ids -> {token_ids, lengths}`, greedy, with constant weights."""
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    decoder = Decoder(model)
    length = settings.max_output_length

    def greedy(source_ids: tf.Tensor) -> dict[str, tf.Tensor]:
        source_lengths = tf.reduce_sum(tf.cast(source_ids != PAD_ID, tf.int32), 1)
        limits = tf.minimum(source_lengths + settings.extra_length, length)
        token_ids, _, lengths = decoder.search(
            source_ids,
            limits,
            DecodeSettings(beam_size=1),
            max_length=length,
            start_id=settings.start_id,
            end_id=settings.end_id,
            static_shapes=True,  # the converter needs the loop's shapes fixed
        )
        return {"token_ids": token_ids, "lengths": lengths}

    function = tf.function(
        greedy,
        input_signature=[tf.TensorSpec([None, None], tf.int32, name="source_ids")],
        autograph=False,
    )
    # Variables read inside the WHILE body stay resource variables (which
    # the interpreter cannot read) unless they are made constants first.
    return convert_variables_to_constants_v2(function.get_concrete_function())


def convert_greedy(model: keras.Model, settings: LiteRTSettings) -> bytes:
    """The ``.tflite`` flatbuffer of the model's greedy search (builtin ops).

    Args:
        model: a model from `build_transformer`.
        settings: the lengths, special ids and quantization.

    Returns:
        The bytes of the LiteRT model.

    Raises:
        ValueError: for another quantization than `QUANTIZATIONS`.
    """
    validation.check_choice("quantization", settings.quantization, QUANTIZATIONS)
    function = _greedy_function(model, settings)
    converter = tf.lite.TFLiteConverter.from_concrete_functions([function], model)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if settings.quantization == "int8":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    return converter.convert()


def export_litert(
    model: keras.Model,
    tokenizer: SubwordTokenizer,
    output_dir: str | os.PathLike[str],
    *,
    quantization: str = "int8",
    overwrite: bool = False,
    **settings: Any,
) -> Path:
    """Writes the LiteRT split: ``model.tflite``, ``tokenizer.model``, ``litert.json``.

    Args:
        model: a model from `build_transformer` (or `load_trained_model`).
        tokenizer: the tokenizer it was trained with.
        output_dir: the folder to write (whole or not at all).
        quantization: ``"int8"`` (dynamic-range weights) or ``"float32"``.
        overwrite: replace an earlier LiteRT export in `output_dir` (a
            folder with ``litert.json`` and ``model.tflite``); it stays whole
            until the new one is complete. Any other non-empty folder is
            refused, never deleted.
        **settings: ``max_input_length`` and ``extra_length`` (the other
            `DecodeSettings` fields are refused: the search is greedy).

    Returns:
        The folder.

    Raises:
        ValueError: for a setting other than the two lengths or another
            quantization.
        FileExistsError, keras_transformer.files.FolderLockedError: as
            `check_export_target` and `writing_export` say.

    Example:
    >>> path = export_litert(model, tokenizer, "de_en_litert")  # doctest: +SKIP
    >>> LiteRTTranslator(path).translate(["Ein Hund."])  # doctest: +SKIP
    ['A dog.']
    """
    validation.check_choice("quantization", quantization, QUANTIZATIONS)
    refused = sorted(set(settings) - {"max_input_length", "extra_length"})
    if refused:
        raise ValueError(
            f"The LiteRT export decodes greedily and takes only max_input_length "
            f"and extra_length; leave out {', '.join(refused)}."
        )
    output_dir = check_export_target(output_dir, overwrite, FORMAT)  # fail fast
    checked = resolve_settings(
        model, tokenizer, None, {**settings, "beam_size": 1}, export="The LiteRT export"
    )
    info = LiteRTSettings.of(checked, quantization)
    flatbuffer = convert_greedy(model, info)
    with writing_export(output_dir, overwrite, FORMAT) as folder:
        (folder / MODEL_FILE).write_bytes(flatbuffer)
        (folder / TOKENIZER_FILE).write_bytes(tokenizer.model_proto)
        values = {
            "format_version": FORMAT_VERSION,
            **dataclasses.asdict(info),
            "file_sha256": {MODEL_FILE: hashlib.sha256(flatbuffer).hexdigest()},
        }
        (folder / INFO_FILE).write_text(json.dumps(values, indent=2) + "\n")
    return output_dir


def _output_ids(row: np.ndarray, settings: LiteRTSettings) -> list[int]:
    """The ids of one output up to END, without padding or START (as
    `SubwordTokenizer.decode` reads them)."""
    kept = []
    for token_id in row.tolist():
        if token_id == settings.end_id:
            break
        if token_id not in (PAD_ID, settings.start_id):
            kept.append(token_id)
    return kept


class LiteRTTranslator:
    """Translates with a LiteRT export: sentencepiece outside, the search inside.

    Needs ``ai-edge-litert`` and ``sentencepiece`` (not TensorFlow).

    Args:
        path: a folder written by `export_litert`.
        num_threads: the interpreter's CPU threads (None: its default).
        batch_size: lines per call of the interpreter (`translate`'s default).

    Example:
    >>> translator = LiteRTTranslator("exported/de_en_litert")  # doctest: +SKIP
    >>> translator.translate(["Ein Hund rennt.", ""])  # doctest: +SKIP
    ['A dog runs.', '']
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        num_threads: int | None = None,
        batch_size: int = 1,
    ) -> None:
        import sentencepiece as spm
        from ai_edge_litert.interpreter import Interpreter

        validation.check_path("`path`", path)
        validation.check_int("batch_size", batch_size, 1)
        path = Path(path)
        missing = [
            n
            for n in (MODEL_FILE, TOKENIZER_FILE, INFO_FILE)
            if not (path / n).is_file()
        ]
        if missing:
            raise ValueError(
                f"{path} is not a LiteRT export (it lacks {', '.join(missing)}); "
                "write one with keras-transformer export --format litert."
            )
        fields = dataclasses.fields(LiteRTSettings)
        required = [f.name for f in fields if f.default is dataclasses.MISSING]
        values = read_export_record(path / INFO_FILE, required, "litert")
        self.settings = LiteRTSettings(
            **{f.name: values[f.name] for f in fields if f.name in values}
        )
        #: What keeps more of a source it cuts, for the command line's report
        #: of them (`keras_transformer.cli` `report_cut_sources`).
        self.input_limit_remedy = export_cut_remedy(
            self.settings.max_input_length, self.settings.learned_source_positions
        )
        with reading_export_files([path / TOKENIZER_FILE], "litert"):
            proto = (path / TOKENIZER_FILE).read_bytes()
            self.sentencepiece = spm.SentencePieceProcessor(model_proto=proto)
        fingerprint = hashlib.sha256(proto).hexdigest()
        check_export_tokenizer(fingerprint, values, path / INFO_FILE, "litert")
        with reading_export_files([path / MODEL_FILE], "litert", engine=True):
            self.interpreter = Interpreter(
                model_path=str(path / MODEL_FILE), num_threads=num_threads
            )
        check_export_files(path, values, path / INFO_FILE, "litert")
        self._input = self.interpreter.get_input_details()[0]["index"]
        # The outputs by rank: token_ids (batch, length), lengths (batch,).
        outputs = {
            len(d["shape_signature"]): d["index"]
            for d in self.interpreter.get_output_details()
        }
        self._token_ids, self._lengths = outputs[2], outputs[1]
        self._shape: tuple[int, int] | None = None
        self.batch_size = batch_size
        #: The indices of the lines of the last call that were cut to
        #: `max_input_length` (`encode`).
        self.cut_lines: tuple[int, ...] = ()

    @property
    def max_input_length(self) -> int:
        """The longest source in subword ids, END included (``litert.json``)."""
        return self.settings.max_input_length

    def encode(self, lines: Sequence[str]) -> list[list[int]]:
        """Each line's source ids: its first ``max_input_length - 1`` ids, END.
        The lines that were longer and cut are recorded in `cut_lines`, and
        a `SourceCutWarning` names them.

        Raises:
            TypeError: for one string instead of a list of lines (each of
                its characters would be translated as a line), or a line
                that is not a str.
        """
        lines = validation.check_lines("lines", lines)
        rows = self.sentencepiece.encode(lines, out_type=int)
        where = "LiteRTTranslator.cut_lines"
        kept, self.cut_lines = cut_export_sources(
            rows,
            self.max_input_length,
            self.settings.end_id,
            where,
            self.input_limit_remedy,
        )
        return kept

    def decode_ids(self, source_ids: np.ndarray) -> list[list[int]]:
        """The greedy output ids of a padded batch ``int32 [batch, length]``,
        END and padding removed."""
        source_ids = np.asarray(source_ids, np.int32)
        if source_ids.shape != self._shape:
            self.interpreter.resize_tensor_input(self._input, source_ids.shape)
            self.interpreter.allocate_tensors()
            self._shape = source_ids.shape
        self.interpreter.set_tensor(self._input, source_ids)
        self.interpreter.invoke()
        token_ids = self.interpreter.get_tensor(self._token_ids)
        lengths = self.interpreter.get_tensor(self._lengths)
        return [
            _output_ids(row[:n], self.settings)
            for row, n in zip(token_ids, lengths, strict=True)
        ]

    def translate(
        self, lines: Sequence[str], batch_size: int | None = None
    ) -> list[str]:
        """One translation per line (``""`` for a line without subword tokens),
        `batch_size` lines per call (default: the translator's)."""
        batch_size = self.batch_size if batch_size is None else batch_size
        validation.check_int("batch_size", batch_size, 1)
        sources = self.encode(lines)
        outputs = [""] * len(sources)
        todo = [i for i, ids in enumerate(sources) if len(ids) > 1]
        for start in range(0, len(todo), batch_size):
            batch = todo[start : start + batch_size]
            width = max(len(sources[i]) for i in batch)
            padded = np.zeros((len(batch), width), np.int32)
            for row, i in enumerate(batch):
                padded[row, : len(sources[i])] = sources[i]
            for i, ids in zip(batch, self.decode_ids(padded), strict=True):
                outputs[i] = self.sentencepiece.decode(ids)
        return outputs


def _load_translator(
    folder: str | os.PathLike[str],
    weights: str = "last",
    *,
    batch_size: int = 1,
    seed: int | None = None,
    **settings: Any,
) -> LiteRTTranslator:
    """``keras-transformer translate --workdir FOLDER``: the folder's greedy
    search, with the lengths it was exported with. A search flag that asks
    for just that (``--method greedy``, ``--beam-size 1``, the exported
    lengths) is taken; another is refused in one line."""
    translator = LiteRTTranslator(folder, batch_size=batch_size)
    refuse_other_search(folder, translator.settings, settings)
    return translator


def refuse_other_search(
    folder: str | os.PathLike[str], exported: LiteRTSettings, given: dict[str, Any]
) -> None:
    """Refuse, in one line naming the flags, the `DecodeSettings` fields
    `given` that ask for another search than the export's: greedy (beam
    size 1) with the `exported` lengths."""
    served = {
        "method": "greedy",
        "beam_size": 1,
        "max_input_length": exported.max_input_length,
        "extra_length": exported.extra_length,
    }
    other = sorted(name for name in given if given[name] != served.get(name))
    if other:
        flags = ", ".join("--" + name.replace("_", "-") for name in other)
        raise ValueError(
            f"{folder} is a LiteRT export: it decodes greedily with the lengths it "
            f"was exported with (max_input_length {exported.max_input_length}, "
            f"extra_length {exported.extra_length}); leave out {flags}."
        )


def _summary(path: Path, kind: str, quantization: str | None) -> str:
    """The closing line of ``keras-transformer export --format litert``."""
    return (
        f"Exported {path / MODEL_FILE} (greedy, source ids -> token ids, "
        f"{quantization} weights) and {TOKENIZER_FILE}; translate with "
        f"keras-transformer translate --workdir {path} or LiteRTTranslator."
    )


#: The LiteRT split: the registry's ``litert`` (``--overwrite`` replaces
#: only a folder with ``litert.json`` and ``model.tflite``).
FORMAT = ExportFormat(
    "LiteRT",
    (INFO_FILE, MODEL_FILE),
    (MODEL_FILE, TOKENIZER_FILE, INFO_FILE),
    option="litert",
    quantizations=QUANTIZATIONS,
    settings=("max_input_length", "extra_length"),
    export_model=export_litert,
    load_translator=_load_translator,
    summary=_summary,
)
