"""A translation model as a CTranslate2 model folder, and the translator that serves it.

CTranslate2 (OpenNMT) runs Transformer translation on the CPU with its own
kernels, int8/int16/float16 weights and a batched beam search. It has no
TensorFlow/Keras converter, so `export_ctranslate2` fills its model
specification (`ctranslate2.specs.TransformerSpec`) from the Keras weights
directly, and `CTranslate2Translator` serves the folder with this project's
decoding (§6.1), so that a float32 export translates like `Translator`:

- the interleaved sinusoid table of Eqs. 5-6 (`sinusoidal_encoding`) is
  passed as the position encodings (CTranslate2's own table concatenates
  sines and cosines), or the learned table of row (E);
- embeddings multiplied by sqrt(d_model) and the pre-softmax projection tied
  to the target embedding matrix (§3.4); the LayerNorm epsilon of the model;
- the source ends with END after its first
  ``max_input_length - 1`` tokens; an output may have the source's number
  of tokens + 50 (§6.1), END included; no minimum length; padding (id 0)
  is never produced;
- one difference is left: a blank line (a source of END alone) gives an
  empty translation, since CTranslate2 does not decode a source of one
  special token; `Translator` decodes it as any other source;
- beam search ranks finished hypotheses by ``log P / lp(Y)`` with the GNMT
  penalty ``lp(Y) = ((5 + |Y|) / 6) ** alpha`` (Wu et al. 2016, Eq. 14).
  CTranslate2 only offers ``|Y| ** alpha``, so it returns its `beam_size`
  finished hypotheses with their raw log-probabilities and they are
  re-ranked here.

The folder holds CTranslate2's ``model.bin``, ``config.json`` and
``shared_vocabulary.json``, the SentencePiece model (``sentencepiece.model``)
and ``keras_transformer.json`` (the decoding settings above). Serving needs
only ``ctranslate2`` and ``sentencepiece``: no TensorFlow, no Keras, no
keras_transformer import beyond this module's own top (`CTranslate2Translator`
imports neither).

Example:
>>> from keras_transformer.ctranslate2 import (  # doctest: +SKIP
...     CTranslate2Translator, export_run_ctranslate2)
>>> export_run_ctranslate2(  # doctest: +SKIP
...     "runs/de_en", "exported/de_en_ct2", quantization="int8")
>>> CTranslate2Translator("exported/de_en_ct2").translate(  # doctest: +SKIP
...     ["Ein Hund."])

Reference: Vaswani et al. (2017), §3.4, §3.5, §6.1; Wu et al. (2016), Eq. 14;
Klein et al. (2020), "Efficient and High-Quality Neural Machine Translation
with OpenNMT" (CTranslate2).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from keras_transformer.conventions import (
    DEFAULT_MAX_INPUT_LENGTH,
    END_ID,
    PAD_ID,
    START_ID,
    UNK_ID,
)

#: The decoding settings and the provenance of the folder.
INFO_FILE = "keras_transformer.json"
#: The SentencePiece model, beside CTranslate2's files.
TOKENIZER_FILE = "sentencepiece.model"
#: CTranslate2's weights file: with `INFO_FILE`, what makes a folder an
#: export that ``overwrite`` may replace.
MODEL_BIN = "model.bin"
#: Everything `export_ctranslate2` writes into its folder (CTranslate2's
#: ``model.bin``, ``config.json`` and vocabulary, then this module's files).
_EXPORT_ENTRIES = (
    MODEL_BIN,
    "config.json",
    "shared_vocabulary.json",
    TOKENIZER_FILE,
    INFO_FILE,
)
#: The weight types `export_ctranslate2` writes (CTranslate2's names).
QUANTIZATIONS = (
    "float32",
    "int8",
    "int8_float32",
    "int8_float16",
    "int8_bfloat16",
    "int16",
    "float16",
    "bfloat16",
)
_FORMAT_VERSION = 1
#: Keras activation name -> `ctranslate2.specs.common_spec.Activation` name.
_ACTIVATIONS = {
    "relu": "RELU",
    "gelu": "GELU",
    "silu": "SWISH",
    "swish": "SWISH",
    "tanh": "Tanh",
    "sigmoid": "Sigmoid",
}


def gnmt_length_penalty(length: int, alpha: float) -> float:
    """`lp(Y) = ((5 + |Y|) / 6) ** alpha` (Wu et al. 2016, Eq. 14).

    Example:
    >>> round(gnmt_length_penalty(7, 0.6), 6)
    1.515717

    Reference: Wu et al. (2016), Eq. 14; Vaswani et al. (2017), §6.1.
    """
    return ((5.0 + length) / 6.0) ** alpha


# ------------------------------------------------------------------ refusals
def check_convertible(model: Any) -> None:
    """Refuses, in one line, a model that CTranslate2 cannot express.

    CTranslate2's Transformer has full (not restricted) attention, added
    sinusoidal or learned positions, no relative positions beside absolute
    ones, `d_v = d_k`, biases on every projection, and a few activations.

    Args:
        model: a Keras model from `build_transformer`.

    Raises:
        ValueError: naming the setting and what to do instead.
    """
    from keras_transformer.layers import PositionEmbedding, SinusoidalPositionEncoding
    from keras_transformer.models import TransformerStack

    stack = TransformerStack.of(model)
    for layer in (stack.source_position, stack.target_position):
        if not isinstance(layer, SinusoidalPositionEncoding | PositionEmbedding):
            raise ValueError(
                f"CTranslate2 cannot express the position layer {layer.name!r} "
                f"({type(layer).__name__}); export a model with "
                "model.position_encoding='sinusoidal' or 'learned'."
            )
        if layer.merge_mode != "add":
            raise ValueError(
                f"CTranslate2 adds position encodings; {layer.name!r} has "
                f"merge_mode={layer.merge_mode!r} (concatenated positions). Use "
                "keras-transformer export (the SavedModel) for this model."
            )
    for block in [*stack.encoder_blocks, *stack.decoder_blocks]:
        _check_block(block)


def _check_block(block: Any) -> None:
    """One block's settings that CTranslate2 has no counterpart for."""
    refusals = {
        "attention_window": (
            block.attention_window is not None,
            "restricted self-attention (§4)",
        ),
        "relative_positions": (
            block.relative_positions is not None,
            "relative position representations beside absolute positions "
            "(CTranslate2 drops the position encodings with them)",
        ),
        "value_dim": (
            block.value_dim is not None and block.value_dim != block.key_dim,
            "d_v different from d_k",
        ),
        "use_bias": (not block.use_bias, "projections without biases"),
        "activation": (
            str(block.activation) not in _ACTIVATIONS,
            f"the activation (CTranslate2 has {', '.join(sorted(_ACTIVATIONS))})",
        ),
    }
    for name, (refused, what) in refusals.items():
        if refused:
            raise ValueError(
                f"CTranslate2 cannot express model.{name}="
                f"{getattr(block, name)!r} ({what}); export this model with "
                "keras-transformer export (the SavedModel) instead."
            )


# ----------------------------------------------------------------- the spec
def _linear(spec: Any, kernels: Sequence[Any], biases: Sequence[Any]) -> None:
    """A CTranslate2 linear layer from Keras kernels `(in, out)`, fused along
    the outputs (CTranslate2 stores `(out, in)`)."""
    import numpy as np

    spec.weight = np.concatenate([np.asarray(k).T for k in kernels], axis=0)
    spec.bias = np.concatenate([np.asarray(b) for b in biases], axis=0)


def _norm(spec: Any, layer: Any) -> None:
    import numpy as np

    spec.gamma = np.asarray(layer.gamma)
    spec.beta = np.asarray(layer.beta)


def _attention(spec: Any, layer: Any, norm: Any, self_attention: bool) -> None:
    """Self-attention: one fused QKV linear; encoder-decoder attention: Q,
    then fused KV; then W^O (Eq. 2). Heads are the consecutive `d_k`
    slices of each projection, in both."""
    q, k, v = layer.query_kernel, layer.key_kernel, layer.value_kernel
    qb, kb, vb = layer.query_bias, layer.key_bias, layer.value_bias
    if self_attention:
        _linear(spec.linear[0], (q, k, v), (qb, kb, vb))
    else:
        _linear(spec.linear[0], (q,), (qb,))
        _linear(spec.linear[1], (k, v), (kb, vb))
    _linear(spec.linear[-1], (layer.output_kernel,), (layer.output_bias,))
    _norm(spec.layer_norm, norm)


def _feed_forward(spec: Any, block: Any) -> None:
    ffn = block.feed_forward
    inner, outer = ffn.inner_dense, ffn.output_dense
    _linear(spec.linear_0, (inner.kernel,), (inner.bias,))
    _linear(spec.linear_1, (outer.kernel,), (outer.bias,))
    _norm(spec.layer_norm, block.feed_forward_norm)


def _position_table(layer: Any, rows: int, depth: int) -> Any:
    """The `(rows, depth)` table the model adds: Eqs. 5-6 interleaved, or
    the learned embeddings of row (E)."""
    import numpy as np
    from keras import ops

    from keras_transformer.layers.position import sinusoidal_encoding

    if hasattr(layer, "position_embeddings"):
        return np.asarray(layer.position_embeddings)
    table = sinusoidal_encoding(np.arange(rows), depth, layer.max_wavelength)
    return ops.convert_to_numpy(table)


def transformer_spec(model: Any, position_rows: int) -> Any:
    """The `ctranslate2.specs.TransformerSpec` of a `build_transformer`
    model, its weights filled in (vocabularies not yet registered).

    Args:
        model: the Keras model (`check_convertible` first).
        position_rows: rows of the sinusoid table: the longest source or
            output the folder will serve (learned tables keep their size).

    Returns:
        The spec, post-LN (§3.1) or pre-LN with final norms as the model.

    Reference: Vaswani et al. (2017), §3.1-§3.5.
    """
    import numpy as np
    from ctranslate2.specs import common_spec, transformer_spec

    from keras_transformer.models import TransformerStack

    stack = TransformerStack.of(model)
    first = stack.encoder_blocks[0]
    d_model = stack.source_embedding.embedding_dim
    head_dim = first.key_dim or d_model // first.num_heads
    activation = common_spec.Activation[_ACTIVATIONS[str(first.activation)]]
    options = {
        "pre_norm": first.norm_first,
        "activation": activation,
        "head_dim": None if head_dim * first.num_heads == d_model else head_dim,
    }
    encoder = transformer_spec.TransformerEncoderSpec(
        len(stack.encoder_blocks), first.num_heads, **options
    )
    decoder = transformer_spec.TransformerDecoderSpec(
        len(stack.decoder_blocks), first.num_heads, **options
    )
    spec = transformer_spec.TransformerSpec(encoder, decoder)
    spec.config.layer_norm_epsilon = float(first.layer_norm_epsilon)

    for side, position in (
        (encoder, stack.source_position),
        (decoder, stack.target_position),
    ):
        table = _position_table(position, position_rows, d_model)
        side.position_encodings.encodings = table.astype("float32")
    encoder.embeddings[0].weight = np.asarray(stack.source_embedding.embeddings)
    decoder.embeddings.weight = np.asarray(stack.target_embedding.embeddings)
    # §3.4: the pre-softmax linear is the target embedding matrix, unscaled.
    decoder.projection.weight = np.asarray(stack.target_embedding.embeddings)
    for layer, block in zip(encoder.layer, stack.encoder_blocks, strict=True):
        _attention(
            layer.self_attention, block.self_attention, block.self_attention_norm, True
        )
        _feed_forward(layer.ffn, block)
    for layer, block in zip(decoder.layer, stack.decoder_blocks, strict=True):
        _attention(
            layer.self_attention, block.self_attention, block.self_attention_norm, True
        )
        _attention(
            layer.attention, block.cross_attention, block.cross_attention_norm, False
        )
        _feed_forward(layer.ffn, block)
    if stack.encoder_final_norm is not None:
        _norm(encoder.layer_norm, stack.encoder_final_norm)
        _norm(decoder.layer_norm, stack.decoder_final_norm)
    return spec


# ------------------------------------------------------------------ export
def _decode_info(model: Any, tokenizer: Any, settings: Any, changes: dict) -> dict:
    """The decoding settings of the folder (`DecodeSettings` fields, §6.1),
    capped as the SavedModel's are by learned position tables."""
    from keras_transformer.decoding.settings import settings_with
    from keras_transformer.models import TransformerStack

    stack = TransformerStack.of(model)
    source_rows = getattr(stack.source_position, "max_length", None)
    target_rows = getattr(stack.target_position, "max_length", None)
    changes = {k: v for k, v in changes.items() if v is not None}
    if "max_input_length" not in changes and settings is None:
        changes["max_input_length"] = min(
            DEFAULT_MAX_INPUT_LENGTH, source_rows or DEFAULT_MAX_INPUT_LENGTH
        )
    decode = settings_with(settings, changes)
    if decode.strategy not in ("beam", "greedy"):
        raise ValueError(
            f"A CTranslate2 export serves beam search or greedy decoding; got "
            f"method={decode.method!r}. Pass method='beam' (--method beam)."
        )
    if source_rows is not None and decode.max_input_length > source_rows:
        raise ValueError(
            f"max_input_length={decode.max_input_length} is longer than the "
            f"model's learned source positions ({source_rows}). Pass "
            f"max_input_length <= {source_rows}."
        )
    max_output = decode.max_input_length + decode.extra_length
    if target_rows is not None:
        max_output = min(max_output, target_rows)
    vocabulary = stack.target_embedding.vocabulary_size
    tokenizer.check_compatible(expected_vocabulary_size=vocabulary)
    return {
        "format_version": _FORMAT_VERSION,
        "kind": "translation",
        "engine": "ctranslate2",
        "beam_size": decode.beam_size if decode.strategy == "beam" else 1,
        "alpha": decode.alpha,
        "extra_length": decode.extra_length,
        "max_input_length": decode.max_input_length,
        "max_output_length": max_output,
        "vocabulary_size": tokenizer.vocabulary_size,
        "tokenizer_fingerprint": tokenizer.fingerprint,
        "pad_id": PAD_ID,
        "unk_id": UNK_ID,
        "start_id": START_ID,
        "end_id": END_ID,
    }


def _export_format() -> Any:
    """The `keras_transformer.export.ExportFormat` of this module's folders:
    ``overwrite`` replaces only a folder with `MODEL_BIN` and `INFO_FILE`.
    (Made when needed: `keras_transformer.export` imports TensorFlow.)"""
    from keras_transformer.export import ExportFormat

    return ExportFormat("CTranslate2", (MODEL_BIN, INFO_FILE), _EXPORT_ENTRIES)


def check_quantization(quantization: str) -> str:
    """`quantization` if CTranslate2 can write it, else a one-line ValueError."""
    if quantization not in QUANTIZATIONS:
        raise ValueError(
            f"quantization={quantization!r} is not a CTranslate2 weight type; "
            f"choose one of {', '.join(QUANTIZATIONS)}."
        )
    return quantization


def export_ctranslate2(
    model: Any,
    tokenizer: Any,
    output_dir: str | os.PathLike[str],
    settings: Any = None,
    *,
    quantization: str = "float32",
    overwrite: bool = False,
    **decode_settings: Any,
) -> Path:
    """Writes a CTranslate2 model folder of a translation model.

    Args:
        model: a model from `build_transformer` (or `load_translator`).
        tokenizer: the `SubwordTokenizer` it was trained with.
        output_dir: the folder to write (swapped in whole when complete).
        settings: the `DecodeSettings` the folder is served with (§6.1:
            beam 4, alpha 0.6, +50; a beam of one: greedy).
        quantization: the weight type, one of `QUANTIZATIONS` (``int8``
            weights are about 4x smaller; see
            ``ctranslate2.get_supported_compute_types("cpu")`` for what this
            machine computes in).
        overwrite: replace an earlier CTranslate2 export in `output_dir`
            (a folder with ``model.bin`` and ``keras_transformer.json``); it
            stays whole until the new one is complete. Any other non-empty
            folder is refused, never deleted.
        **decode_settings: `DecodeSettings` fields replacing those of
            `settings` (``beam_size``, ``alpha``, ``max_input_length``,
            ``extra_length``, ``method``).

    Returns:
        The folder.

    Raises:
        ValueError: (one line) for a model CTranslate2 cannot express
            (`check_convertible`), a bad setting or quantization.
        FileExistsError: when `output_dir` is a file, or is not empty and
            `overwrite` is false, or holds something other than an earlier
            CTranslate2 export (never deleted).
        keras_transformer.files.FolderLockedError: when another export
            into `output_dir` is running.

    Example:
    >>> path = export_ctranslate2(  # doctest: +SKIP
    ...     model, tokenizer, "de_en_ct2", quantization="int8")
    """
    import ctranslate2

    from keras_transformer.export import check_export_target, writing_export

    check_quantization(quantization)
    check_convertible(model)
    target = _export_format()
    output_dir = check_export_target(  # before the conversion: fail fast
        os.path.abspath(output_dir), overwrite, target
    )
    decode_settings.pop("temperature", None)  # sampling is not served
    info = _decode_info(model, tokenizer, settings, decode_settings)
    info.update(quantization=quantization, ctranslate2_version=ctranslate2.__version__)
    rows = max(info["max_input_length"], info["max_output_length"])
    spec = transformer_spec(model, rows)
    pieces = [tokenizer.id_to_piece(i) for i in range(tokenizer.vocabulary_size)]
    spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = (
        pieces[UNK_ID], pieces[START_ID], pieces[END_ID],
    )  # fmt: skip
    spec.config.decoder_start_token = pieces[START_ID]
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    spec.validate()
    spec.optimize(quantization=quantization)
    with writing_export(output_dir, overwrite, target) as temporary:
        spec.save(str(temporary))
        (temporary / TOKENIZER_FILE).write_bytes(tokenizer.model_proto)
        (temporary / INFO_FILE).write_text(
            json.dumps(info, indent=2) + "\n", encoding="utf-8"
        )
    return output_dir


def export_run_ctranslate2(
    workdir: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    weights: str = "last",
    *,
    quantization: str = "float32",
    overwrite: bool = False,
    **settings: Any,
) -> Path:
    """`export_ctranslate2` of a translation run (or a SavedModel export
    folder): ``keras-transformer export --format ctranslate2``.

    Args:
        workdir: a translation run folder or an export folder.
        output_dir: the folder to write.
        weights: ``"last"``, ``"best"``, ``"average"`` or a weights file.
        quantization: one of `QUANTIZATIONS`.
        overwrite: replace an earlier CTranslate2 export in `output_dir`.
        **settings: `DecodeSettings` fields.

    Returns:
        The folder.
    """
    from keras_transformer.export import check_export_target, run_kind
    from keras_transformer.translation import load_translator

    kind = run_kind(workdir)
    if kind != "translation":
        raise ValueError(
            f"{workdir} is a {kind} run; only translation runs have a CTranslate2 "
            "export. Leave out --format ctranslate2."
        )
    check_quantization(quantization)
    check_export_target(output_dir, overwrite, _export_format())  # before loading
    model, tokenizer = load_translator(workdir, weights)
    return export_ctranslate2(
        model,
        tokenizer,
        output_dir,
        quantization=quantization,
        overwrite=overwrite,
        **settings,
    )


def is_ctranslate2_dir(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a folder written by `export_ctranslate2`."""
    path = Path(path)
    return (path / MODEL_BIN).is_file() and (path / INFO_FILE).is_file()


# ----------------------------------------------------------------- serving
@dataclass(frozen=True)
class Hypothesis:
    """One translation from `CTranslate2Translator.translate_hypotheses`.

    Attributes:
        text: the detokenized output.
        token_ids: the output ids, END included when the output finished.
        log_prob: `log P(Y | X)`, the sum over the output's tokens.
        score: what the search ranks by: `log_prob / lp(|Y|)` for beam
            search (Eq. 14), `log_prob` for greedy decoding.
    """

    text: str
    token_ids: tuple[int, ...]
    log_prob: float
    score: float


class CTranslate2Translator:
    """Serves a folder of `export_ctranslate2` with this project's decoding.

    Needs only ``ctranslate2`` and ``sentencepiece``. Tokenizes with the
    SentencePiece model of the folder (the ids tensorflow-text gives), keeps
    a source's first ``max_input_length - 1`` tokens, lets each output have
    its source's number of tokens (END included) + ``extra_length`` (§6.1),
    never produces padding, and re-ranks the beam's finished hypotheses by
    the GNMT penalty (Wu et al. 2016, Eq. 14), which CTranslate2 lacks.

    Args:
        folder: the export folder.
        device: ``"cpu"`` (or ``"cuda"``).
        compute_type: CTranslate2's compute type; ``"default"`` computes in
            the folder's weight type.
        inter_threads: batches translated at once.
        intra_threads: threads per batch (0: CTranslate2's default).

    Example:
    >>> translator = CTranslate2Translator("de_en_ct2")  # doctest: +SKIP
    >>> translator.translate(["Zwei Hunde spielen im Schnee."])  # doctest: +SKIP
    ['Two dogs are playing in the snow.']

    Reference: Vaswani et al. (2017), §6.1; Wu et al. (2016), Eq. 14.
    """

    def __init__(
        self,
        folder: str | os.PathLike[str],
        device: str = "cpu",
        compute_type: str = "default",
        inter_threads: int = 1,
        intra_threads: int = 0,
    ) -> None:
        import ctranslate2
        import sentencepiece

        folder = Path(folder)
        if not is_ctranslate2_dir(folder):
            raise ValueError(
                f"{folder} is not a CTranslate2 export (no {MODEL_BIN} and "
                f"{INFO_FILE}); write one with keras-transformer export --format "
                "ctranslate2."
            )
        self.folder = folder
        self.info = json.loads((folder / INFO_FILE).read_text(encoding="utf-8"))
        self.processor = sentencepiece.SentencePieceProcessor(
            model_file=str(folder / TOKENIZER_FILE)
        )
        self.engine = ctranslate2.Translator(
            str(folder),
            device=device,
            compute_type=compute_type,
            inter_threads=inter_threads,
            intra_threads=intra_threads,
        )
        self.beam_size = int(self.info["beam_size"])
        self.alpha = float(self.info["alpha"])
        self.extra_length = int(self.info["extra_length"])
        self.max_input_length = int(self.info["max_input_length"])
        self.max_output_length = int(self.info["max_output_length"])
        self._pad_piece = self.processor.id_to_piece(PAD_ID)
        self._end_piece = self.processor.id_to_piece(END_ID)

    def encode(self, sentences: Sequence[str]) -> list[list[str]]:
        """The source pieces of each sentence: its first ``max_input_length
        - 1``, then END (as `encode_sources` gives).

        Raises:
            TypeError: for one string instead of a list of sentences (each
                of its characters would be translated as a sentence).
        """
        if isinstance(sentences, (str, bytes)):
            raise TypeError(
                "`sentences` must be a list of strings; wrap one in a list."
            )
        ids = self.processor.encode(list(sentences), out_type=int)
        keep = self.max_input_length - 1
        end = [self._end_piece]
        return [self.processor.id_to_piece(row[:keep]) + end for row in ids]

    def _limit(self, pieces: Sequence[str]) -> int:
        """The output cap of one source (§6.1): its tokens, END included,
        + extra_length."""
        return min(len(pieces) + self.extra_length, self.max_output_length)

    def _search(
        self, sources: list[list[str]], beam: int, limit: int, own_alpha: float | None
    ) -> list:
        """CTranslate2's search; every finished hypothesis of the beam with
        its raw log P (re-ranked by `_best`), or with `own_alpha` its best
        by `log P / |Y| ** own_alpha`."""
        return self.engine.translate_batch(
            sources,
            beam_size=beam,
            num_hypotheses=beam if own_alpha is None else 1,
            length_penalty=0.0 if own_alpha is None else own_alpha,
            max_decoding_length=limit,
            min_decoding_length=0,
            max_input_length=0,  # cut in `encode`, END kept
            return_scores=True,
            return_end_token=True,
            suppress_sequences=[[self._pad_piece]],
        )

    def _best(self, result: Any, beam: int, alpha: float | None) -> Hypothesis:
        """The hypothesis with the best `log P / lp(|Y|)` (Eq. 14), or the
        greedy one (`alpha` None: CTranslate2's own ranking, kept)."""
        best = None
        for pieces, log_prob in zip(result.hypotheses, result.scores, strict=True):
            ids = tuple(self.processor.piece_to_id(pieces))
            score = log_prob
            if beam > 1 and alpha is not None:
                score = log_prob / gnmt_length_penalty(len(ids), alpha)
            if alpha is None:
                log_prob = math.nan  # CTranslate2 returns the ranked score
            if best is None or score > best.score:
                best = Hypothesis(self._detokenize(ids), ids, log_prob, score)
        return best

    def _detokenize(self, ids: Sequence[int]) -> str:
        """Text of the ids before the first END, padding and START dropped."""
        kept = []
        for token in ids:
            if token == END_ID:
                break
            if token not in (PAD_ID, START_ID):
                kept.append(token)
        return self.processor.decode(kept)

    def translate_hypotheses(
        self,
        sentences: Sequence[str],
        beam_size: int | None = None,
        alpha: float | None = None,
        batch_size: int = 64,
        rerank: bool = True,
    ) -> list[Hypothesis]:
        """The best hypothesis of each sentence, with its ids and scores.

        Args:
            sentences: raw source sentences.
            beam_size: hypotheses per sentence (default: the folder's; 1:
                greedy decoding).
            alpha: the length-penalty alpha (default: the folder's, §6.1: 0.6).
            batch_size: sentences per CTranslate2 call, in the given order.
            rerank: rank the beam's finished hypotheses by the GNMT penalty
                (what `Translator` does). False keeps CTranslate2's own
                ranking, `log P / |Y| ** alpha` with one hypothesis kept
                (faster, not identical; `log_prob` is then NaN).

        Returns:
            One `Hypothesis` per sentence.
        """
        beam = self.beam_size if beam_size is None else int(beam_size)
        alpha = self.alpha if alpha is None else float(alpha)
        if beam < 1 or alpha < 0 or batch_size < 1:
            raise ValueError(
                "beam_size and batch_size must be at least 1 and alpha at least "
                f"0. Received: beam_size={beam}, alpha={alpha}, "
                f"batch_size={batch_size}"
            )
        own_alpha = None if rerank or beam == 1 else alpha
        ranking = alpha if own_alpha is None else None
        sources = self.encode(sentences)
        best: list[Hypothesis] = []
        for start in range(0, len(sources), batch_size):
            batch = sources[start : start + batch_size]
            limits = [self._limit(pieces) for pieces in batch]
            results = self._search(batch, beam, max(limits), own_alpha)
            for pieces, limit, result in zip(batch, limits, results, strict=True):
                if any(len(hypothesis) > limit for hypothesis in result.hypotheses):
                    # Past its own cap (the batch's was larger): again, alone,
                    # with its own (§6.1).
                    (result,) = self._search([pieces], beam, limit, own_alpha)
                best.append(self._best(result, beam, ranking))
        return best

    def translate(
        self,
        sentences: Sequence[str],
        beam_size: int | None = None,
        alpha: float | None = None,
        batch_size: int = 64,
        rerank: bool = True,
    ) -> list[str]:
        """Translations of raw sentences (`translate_hypotheses`' texts)."""
        hypotheses = self.translate_hypotheses(
            sentences, beam_size, alpha, batch_size, rerank
        )
        return [hypothesis.text for hypothesis in hypotheses]


__all__ = [
    "CTranslate2Translator",
    "Hypothesis",
    "INFO_FILE",
    "QUANTIZATIONS",
    "TOKENIZER_FILE",
    "check_convertible",
    "check_quantization",
    "export_ctranslate2",
    "export_run_ctranslate2",
    "gnmt_length_penalty",
    "is_ctranslate2_dir",
    "transformer_spec",
]
