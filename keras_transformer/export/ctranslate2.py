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
only ``ctranslate2`` and ``sentencepiece``: no TensorFlow, no Keras (this
module's own imports are light: the conventions, `ctranslate2_spec` and
`target`; `CTranslate2Translator` imports neither).

Example:
>>> from keras_transformer.export import export_run_as  # doctest: +SKIP
>>> from keras_transformer.export.ctranslate2 import (  # doctest: +SKIP
...     CTranslate2Translator)
>>> export_run_as(  # doctest: +SKIP
...     "ctranslate2", "runs/de_en", "exported/de_en_ct2", quantization="int8")
>>> CTranslate2Translator("exported/de_en_ct2").translate(  # doctest: +SKIP
...     ["Ein Hund."])

Reference: Vaswani et al. (2017), §3.4, §3.5, §6.1; Wu et al. (2016), Eq. 14;
Klein et al. (2020), "Efficient and High-Quality Neural Machine Translation
with OpenNMT" (CTranslate2).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from keras_transformer import validation
from keras_transformer.conventions import (
    END_ID,
    PAD_ID,
    START_ID,
    UNK_ID,
)
from keras_transformer.cpu import int8_products_saturate, prefer_mkl_for_int8
from keras_transformer.decoding.settings import DecodeSettings
from keras_transformer.export.ctranslate2_spec import (
    check_convertible,
    transformer_spec,
)
from keras_transformer.export.target import (
    ExportFormat,
    check_export_target,
    read_export_record,
    reading_export_files,
    writing_export,
)
from keras_transformer.files import (
    check_export_files,
    check_export_tokenizer,
    file_checksums,
)
from keras_transformer.source_limits import cut_export_sources, export_cut_remedy

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


def import_ctranslate2() -> Any:
    """``ctranslate2``, with Intel MKL where this CPU's int8 products saturate.

    On an x86 CPU without VNNI, int8 GEMMs saturate their 16-bit pair sums,
    so CTranslate2 is pointed at MKL, whose int16 GEMM keeps them exact,
    before its first import (`keras_transformer.cpu.prefer_mkl_for_int8`).
    """
    prefer_mkl_for_int8()
    import ctranslate2

    return ctranslate2


def int8_compute_type(ctranslate2: Any) -> str:
    """The CPU compute type that serves int8 weights exactly on this CPU.

    ``"default"`` (int8) where the CPU adds int8 products in 32 bits (VNNI
    or AMX); elsewhere on x86 oneDNN's int8 GEMM saturates (and MKL's does on
    Intel CPUs), so ``"int16"`` where CTranslate2 runs on MKL (its only
    backend with an int16 GEMM, exact on every x86 CPU), else ``"float32"``.
    """
    if not int8_products_saturate():
        return "default"
    if "int16" in ctranslate2.get_supported_compute_types("cpu"):
        return "int16"
    return "float32"


#: Why an int8 folder computes in int16 on this CPU (one line).
INT8_IN_INT16 = (
    "this CPU has no VNNI, so its int8 products saturate; the int8 weights "
    "compute in int16 (Intel MKL), which keeps float32's translations"
)
#: Why an int8 folder computes in float32 on this CPU (one line).
INT8_IN_FLOAT32 = (
    "this CPU has no VNNI, so its int8 products saturate, and CTranslate2 was "
    "imported without Intel MKL's int16 GEMM, so the int8 weights compute in "
    "float32 (same translations as int8 should give, float32 speed); for "
    "faster exact compute set CT2_USE_MKL=1 before ctranslate2 is imported"
)


def gnmt_length_penalty(length: int, alpha: float) -> float:
    """`lp(Y) = ((5 + |Y|) / 6) ** alpha` (Wu et al. 2016, Eq. 14).

    Example:
    >>> round(gnmt_length_penalty(7, 0.6), 6)
    1.515717

    Reference: Wu et al. (2016), Eq. 14; Vaswani et al. (2017), §6.1.
    """
    return ((5.0 + length) / 6.0) ** alpha


# ------------------------------------------------------------------ export
def _folder_info(model: Any, tokenizer: Any, settings: Any, changes: dict) -> dict:
    """The decoding settings of the folder (`DecodeSettings` fields, §6.1),
    resolved as the SavedModel's are (`resolve_settings`)."""
    from keras_transformer.export.settings import FORMAT_VERSION, resolve_settings

    export = "The CTranslate2 export"
    strategies = ("beam", "greedy")
    resolved = resolve_settings(
        model, tokenizer, settings, changes, strategies=strategies, export=export
    )
    decode = resolved.decode
    if decode.early_stop != "exact":
        raise ValueError(
            f"{export} stops each sentence by CTranslate2's own rule, not "
            f"early_stop={decode.early_stop!r}; export without early_stop."
        )
    return {
        "format_version": FORMAT_VERSION,
        "kind": "translation",
        "engine": "ctranslate2",
        "beam_size": decode.beam_size if decode.strategy == "beam" else 1,
        "alpha": decode.alpha,
        "extra_length": decode.extra_length,
        "max_input_length": decode.max_input_length,
        "max_output_length": resolved.max_output_length,
        "vocabulary_size": resolved.vocabulary_size,
        "tokenizer_fingerprint": resolved.tokenizer_fingerprint,
        "learned_source_positions": resolved.learned_source_positions,
        "pad_id": PAD_ID,
        "unk_id": UNK_ID,
        "start_id": START_ID,
        "end_id": END_ID,
    }


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
        FileExistsError, keras_transformer.files.FolderLockedError: as
            `check_export_target` and `writing_export` say.

    Example:
    >>> path = export_ctranslate2(  # doctest: +SKIP
    ...     model, tokenizer, "de_en_ct2", quantization="int8")
    """
    ctranslate2 = import_ctranslate2()

    check_quantization(quantization)
    check_convertible(model)
    output_dir = check_export_target(  # before the conversion: fail fast
        os.path.abspath(output_dir), overwrite, FORMAT
    )
    info = _folder_info(model, tokenizer, settings, decode_settings)
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
    with writing_export(output_dir, overwrite, FORMAT) as temporary:
        spec.save(str(temporary))
        info["file_sha256"] = file_checksums(temporary, _EXPORT_ENTRIES[:3])
        (temporary / TOKENIZER_FILE).write_bytes(tokenizer.model_proto)
        (temporary / INFO_FILE).write_text(
            json.dumps(info, indent=2) + "\n", encoding="utf-8"
        )
    return output_dir


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
            the folder's weight type, except int8 weights on a CPU whose
            int8 products would saturate (`int8_compute_type`): those
            compute in int16 (Intel MKL), or in float32 with a warning that
            says why where CTranslate2 runs without MKL.
        inter_threads: batches translated at once.
        intra_threads: threads per batch (0: CTranslate2's default).
        beam_size, alpha: the search's (None: the folder's settings).
        batch_size: sentences per CTranslate2 call (`translate`'s default).

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
        *,
        beam_size: int | None = None,
        alpha: float | None = None,
        batch_size: int = 64,
    ) -> None:
        import sentencepiece

        validation.check_path("`folder`", folder)
        ctranslate2 = import_ctranslate2()
        folder = Path(folder)
        if not is_ctranslate2_dir(folder):
            raise ValueError(
                f"{folder} is not a CTranslate2 export (no {MODEL_BIN} and "
                f"{INFO_FILE}); write one with keras-transformer export --format "
                "ctranslate2."
            )
        self.folder = folder
        self.info = read_export_record(
            folder / INFO_FILE,
            (
                "beam_size",
                "alpha",
                "extra_length",
                "max_input_length",
                "max_output_length",
            ),
            "ctranslate2",
        )
        with reading_export_files([folder / TOKENIZER_FILE], "ctranslate2"):
            proto = (folder / TOKENIZER_FILE).read_bytes()
            self.processor = sentencepiece.SentencePieceProcessor(model_proto=proto)
        fingerprint, info_file = hashlib.sha256(proto).hexdigest(), folder / INFO_FILE
        check_export_tokenizer(fingerprint, self.info, info_file, "ctranslate2")
        quantization = str(self.info.get("quantization", "float32"))
        int8_weights = quantization.startswith("int8")
        if device == "cpu" and compute_type == "default" and int8_weights:
            compute_type = int8_compute_type(ctranslate2)
            if compute_type == "float32":
                warnings.warn(f"{folder}: {INT8_IN_FLOAT32}.", stacklevel=2)
        self.compute_type = compute_type
        engine_files = [folder / name for name in _EXPORT_ENTRIES[:3]]
        with reading_export_files(engine_files, "ctranslate2", engine=True):
            self.engine = ctranslate2.Translator(
                str(folder),
                device=device,
                compute_type=compute_type,
                inter_threads=inter_threads,
                intra_threads=intra_threads,
            )
        check_export_files(folder, self.info, info_file, "ctranslate2")
        self.beam_size = int(self.info["beam_size"] if beam_size is None else beam_size)
        self.alpha = float(self.info["alpha"] if alpha is None else alpha)
        self.batch_size = batch_size
        self.extra_length = int(self.info["extra_length"])
        self.max_input_length = int(self.info["max_input_length"])
        self.max_output_length = int(self.info["max_output_length"])
        #: What keeps more of a source it cuts, for the command line's report
        #: of them (`keras_transformer.cli` `report_cut_sources`).
        self.input_limit_remedy = export_cut_remedy(
            self.max_input_length, self.info.get("learned_source_positions")
        )
        #: The indices of the sentences of the last call that were cut to
        #: `max_input_length` (`encode`).
        self.cut_lines: tuple[int, ...] = ()
        self._pad_piece = self.processor.id_to_piece(PAD_ID)

    def encode(self, sentences: Sequence[str]) -> list[list[str]]:
        """The source pieces of each sentence: its first ``max_input_length
        - 1``, then END (as `encode_sources` gives). The sentences that were
        longer and cut are recorded in `cut_lines`, and a `SourceCutWarning`
        names them.

        Raises:
            TypeError: for one string instead of a list of sentences (each
                of its characters would be translated as a sentence), or a
                sentence that is not a str.
        """
        sentences = validation.check_lines("sentences", sentences)
        ids = self.processor.encode(sentences, out_type=int)
        where = "CTranslate2Translator.cut_lines"
        rows, self.cut_lines = cut_export_sources(
            ids, self.max_input_length, END_ID, where, self.input_limit_remedy
        )
        return [self.processor.id_to_piece(row) for row in rows]

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
        batch_size: int | None = None,
        rerank: bool = True,
    ) -> list[Hypothesis]:
        """The best hypothesis of each sentence, with its ids and scores.

        Args:
            sentences: raw source sentences.
            beam_size: hypotheses per sentence (default: the folder's; 1:
                greedy decoding).
            alpha: the length-penalty alpha (default: the folder's, §6.1: 0.6).
            batch_size: sentences per CTranslate2 call, in the given order
                (default: the translator's).
            rerank: rank the beam's finished hypotheses by the GNMT penalty
                (what `Translator` does). False keeps CTranslate2's own
                ranking, `log P / |Y| ** alpha` with one hypothesis kept
                (faster, not identical; `log_prob` is then NaN).

        Returns:
            One `Hypothesis` per sentence.
        """
        beam = self.beam_size if beam_size is None else int(beam_size)
        alpha = self.alpha if alpha is None else float(alpha)
        batch_size = self.batch_size if batch_size is None else batch_size
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

    def translate(self, sentences: Sequence[str], **options: Any) -> list[str]:
        """Translations of raw sentences: the texts of `translate_hypotheses`,
        which takes the same `options` (``beam_size``, ``alpha``,
        ``batch_size``, ``rerank``)."""
        hypotheses = self.translate_hypotheses(sentences, **options)
        return [hypothesis.text for hypothesis in hypotheses]


def _load_translator(
    folder: str | os.PathLike[str],
    weights: str = "last",
    *,
    method: str | None = None,
    beam_size: int | None = None,
    alpha: float | None = None,
    batch_size: int = 64,
    seed: int | None = None,
    **settings: Any,
) -> CTranslate2Translator:
    """``keras-transformer translate --workdir FOLDER``: the folder's search,
    or the `method` (beam or greedy), `beam_size` and `alpha` given."""
    if method not in (None, "beam", "greedy") or settings:
        given = [f"--method {method}"] if method not in (None, "beam", "greedy") else []
        given += ["--" + name.replace("_", "-") for name in sorted(settings)]
        raise ValueError(
            f"{folder} is a CTranslate2 export: it serves beam search or greedy "
            f"decoding with its own lengths; leave out {', '.join(given)}."
        )
    beam = 1 if method == "greedy" else beam_size
    return CTranslate2Translator(
        folder, beam_size=beam, alpha=alpha, batch_size=batch_size
    )


def _summary(path: Path, kind: str, quantization: str | None) -> str:
    """The closing line of ``keras-transformer export --format ctranslate2``
    (saying so where int8 weights will compute in int16 or float32 here)."""
    line = (
        f"Exported the translation model to {path} for CTranslate2 ({quantization} "
        f"weights). Translate with: keras-transformer translate --workdir {path}"
    )
    if str(quantization).startswith("int8"):
        compute_type = int8_compute_type(import_ctranslate2())
        why = {"int16": INT8_IN_INT16, "float32": INT8_IN_FLOAT32}
        if compute_type in why:
            line += f" (On this machine: {why[compute_type]}.)"
    return line


#: The CTranslate2 model folder: the registry's ``ctranslate2`` (``overwrite``
#: replaces only a folder with `MODEL_BIN` and `INFO_FILE`).
FORMAT = ExportFormat(
    "CTranslate2",
    (MODEL_BIN, INFO_FILE),
    _EXPORT_ENTRIES,
    option="ctranslate2",
    quantizations=QUANTIZATIONS,
    # Not `early_stop`: CTranslate2 stops a sentence by its own rule.
    settings=tuple(n for n in DecodeSettings.__dataclass_fields__ if n != "early_stop"),
    export_model=export_ctranslate2,
    load_translator=_load_translator,
    summary=_summary,
)

__all__ = [
    "FORMAT",
    "MODEL_BIN",
    "CTranslate2Translator",
    "Hypothesis",
    "INFO_FILE",
    "QUANTIZATIONS",
    "TOKENIZER_FILE",
    "check_quantization",
    "export_ctranslate2",
    "gnmt_length_penalty",
    "import_ctranslate2",
    "int8_compute_type",
    "is_ctranslate2_dir",
]
