"""Subword vocabulary learned with SentencePiece, applied in-graph.

The Transformer paper encodes sentences with a shared source-target
vocabulary of subword units (byte-pair encoding for English-German, a
word-piece vocabulary for English-French). :class:`SubwordTokenizer` learns
such a vocabulary with SentencePiece (Kudo & Richardson, 2018), unigram
language model by default or BPE, and tokenizes with TensorFlow ops, so
that tokenization can run inside ``tf.data`` pipelines and be exported inside
a SavedModel. The tokenizer is a ``tf.Module``: assigning it to an attribute
of an exported module tracks what it holds.

The ops come from tensorflow-text. A unigram vocabulary (the default) is
applied by ``tensorflow_text.FastSentencepieceTokenizer``, which keeps the
model in a constant tensor; it gives the ids of the SentencePiece library
(``tests/data/test_data_tokenizer.py`` compares them). A BPE or byte-fallback
vocabulary, for which that op gives other ids, is applied by
``tensorflow_text.SentencepieceTokenizer`` with its model in a shared
resource (see ``docs/architecture.md``, "The tokenizer inside the graph").

Learning is deterministic: a vocabulary is a function of its sentences and
settings (``seed`` included), byte-identical across processes and machines
with the same sentencepiece version; a sample of ``max_sentences`` is drawn
by this module from ``seed``, not by SentencePiece. :meth:`SubwordTokenizer.save`
writes each file whole, ``tokenizer.json`` last as the mark of a complete
tokenizer.

Special ids are fixed for every tokenizer this class trains or loads:
``PAD_ID = 0``, ``UNK_ID = 1``, ``START_ID = 2`` (``<s>``) and
``END_ID = 3`` (``</s>``).

Text normalisation (SentencePiece's default ``nmt_nfkc`` rule), applied before
tokenization, is the only thing a round trip ``decode(encode(s))`` loses:

* Unicode NFKC normalisation (e.g. ``"ﬁ"`` becomes ``"fi"``, full-width
  letters become ASCII), plus removal of control characters;
* leading and trailing whitespace is removed and runs of whitespace (TABs and
  newlines included) become one space.

Characters never seen in training become ``UNK_ID`` and are decoded as
``" ⁇ "`` (unless the tokenizer was trained with ``byte_fallback=True``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

import sentencepiece as spm
import tensorflow as tf
from sentencepiece import sentencepiece_model_pb2

from keras_transformer import files
from keras_transformer.data.sentencepiece_backend import (
    check_training_arguments,
    in_graph_tokenizer,
    learn_model,
    non_empty_sentences,
    sample_sentences,
)

__all__ = ["SubwordTokenizer"]

_MODEL_FILE = "tokenizer.model"
_CONFIG_FILE = "tokenizer.json"
_FORMAT_VERSION = 1


def _fingerprint(proto: bytes) -> str:
    return hashlib.sha256(proto).hexdigest()


def _parse(proto: bytes) -> sentencepiece_model_pb2.ModelProto:
    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(proto)
    return model


def _model_type_name(model: sentencepiece_model_pb2.ModelProto) -> str:
    type_enum = sentencepiece_model_pb2.TrainerSpec.ModelType
    return type_enum.Name(model.trainer_spec.model_type).lower()


class SubwordTokenizer(tf.Module):
    """A SentencePiece subword vocabulary with in-graph tokenization.

    Build one with :meth:`train`, :meth:`load` or :meth:`from_proto`; the
    constructor takes the serialized SentencePiece model.

    Example:
        >>> sentences = [
        ...     "Ein Hund rennt im Park.",
        ...     "Ein Mann liest ein Buch.",
        ...     "Zwei Kinder spielen im Garten.",
        ... ] * 20
        >>> tokenizer = SubwordTokenizer.train(sentences, vocabulary_size=32)
        >>> ids = tokenizer.tokenize(["Ein Hund rennt."])  # a RaggedTensor
        >>> tokenizer.detokenize(ids).numpy().tolist()
        [b'Ein Hund rennt.']
        >>> import tempfile
        >>> folder = tokenizer.save(tempfile.mkdtemp())  # e.g. runs/de_en/tokenizer
        >>> SubwordTokenizer.load(folder).fingerprint == tokenizer.fingerprint
        True

    Args:
        model_proto: A serialized SentencePiece ``ModelProto`` whose special
            ids are pad=0, unk=1, bos=2, eos=3.
    """

    PAD_ID = 0
    UNK_ID = 1
    START_ID = 2
    END_ID = 3

    def __init__(self, model_proto: bytes) -> None:
        super().__init__(name="subword_tokenizer")
        if not isinstance(model_proto, bytes | bytearray) or not model_proto:
            raise TypeError(
                "SubwordTokenizer needs the serialized SentencePiece model as "
                f"non-empty bytes, got {type(model_proto).__name__}. Use "
                "SubwordTokenizer.load(directory) to read a saved tokenizer."
            )
        model_proto = bytes(model_proto)
        processor = spm.SentencePieceProcessor()
        try:
            processor.LoadFromSerializedProto(model_proto)
        except (RuntimeError, OSError) as e:
            raise ValueError(
                f"The bytes are not a valid SentencePiece model ({e}). Pass the "
                "content of a tokenizer.model file written by "
                "SubwordTokenizer.save or by the sentencepiece trainer."
            ) from e
        found = (
            processor.pad_id(),
            processor.unk_id(),
            processor.bos_id(),
            processor.eos_id(),
        )
        wanted = (self.PAD_ID, self.UNK_ID, self.START_ID, self.END_ID)
        if found != wanted:
            raise ValueError(
                f"This SentencePiece model has special ids (pad, unk, bos, eos) = "
                f"{found}, but SubwordTokenizer needs {wanted}. Train the "
                "vocabulary with SubwordTokenizer.train, or pass pad_id=0, "
                "unk_id=1, bos_id=2, eos_id=3 to the sentencepiece trainer."
            )
        self._proto = model_proto
        self._processor = processor
        self._fingerprint = _fingerprint(model_proto)
        model = _parse(model_proto)
        self._model_type = _model_type_name(model)
        self._tokenizer = in_graph_tokenizer(model_proto, model, self._fingerprint)

    # -- construction -------------------------------------------------------

    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        vocabulary_size: int,
        *,
        model_type: Literal["unigram", "bpe"] = "unigram",
        character_coverage: float = 1.0,
        seed: int = 0,
        max_sentences: int | None = None,
        byte_fallback: bool = False,
        num_threads: int = 1,
    ) -> SubwordTokenizer:
        """Learns a subword vocabulary from sentences held in memory.

        For a shared source-target vocabulary (the paper's setup, and what
        :func:`~keras_transformer.data.make_translation_dataset` expects when
        one tokenizer serves both sides), pass the sentences of both
        languages, e.g. ``itertools.chain(pairs.sources, pairs.targets)``.

        The result is a function of the sentences (in their order) and the
        arguments: the same call gives a byte-identical model (the same
        :attr:`fingerprint`) in every process and on every machine with the
        same sentencepiece version. ``max_sentences`` samples with a numpy
        bit generator seeded by ``seed``; SentencePiece's own sampling is off,
        since it draws from a generator seeded once per process that
        ``seed`` does not reach (two processes would learn two vocabularies).

        Args:
            texts: Training sentences; empty strings are ignored.
            vocabulary_size: Number of ids, the four special ids included.
            model_type: ``"unigram"`` (SentencePiece's unigram language model)
                or ``"bpe"`` (byte-pair encoding).
            character_coverage: Share of characters the vocabulary must cover;
                rarer characters become ``UNK_ID``. 1.0 suits alphabetic
                languages, 0.9995 is usual for Chinese or Japanese.
            seed: Seed of the sample that ``max_sentences`` draws (a
                non-negative integer); without sampling it changes nothing.
            max_sentences: If set and the non-empty sentences are more, train
                on a uniform random sample of this many of them (kept in
                their order); ``None`` uses them all.
            byte_fallback: Decompose unknown characters into UTF-8 byte pieces
                instead of ``UNK_ID``; uses 256 ids of the vocabulary.
            num_threads: Training threads. The learned vocabulary depends on
                the thread count, so keep it fixed for reproducible results.

        Returns:
            The trained tokenizer.

        Raises:
            ValueError: If an argument is invalid or the corpus is too small
                for ``vocabulary_size``.
        """
        check_training_arguments(
            texts,
            vocabulary_size,
            model_type,
            character_coverage,
            seed,
            max_sentences,
            byte_fallback,
        )
        counter = {"sentences": 0}
        options = {
            "model_type": model_type,
            "vocab_size": vocabulary_size,
            "character_coverage": character_coverage,
            "byte_fallback": byte_fallback,
            "num_threads": num_threads,
            **_fixed_options(cls),
        }
        chosen: Iterable[str] = non_empty_sentences(texts, counter)
        if max_sentences is not None:
            chosen = sample_sentences(chosen, max_sentences, int(seed))
        # For any randomness left inside SentencePiece (none is known).
        spm.set_random_generator_seed(int(seed))
        return cls(learn_model(chosen, options, counter, max_sentences))

    @classmethod
    def from_proto(cls, model_proto: bytes) -> SubwordTokenizer:
        """Builds a tokenizer from a serialized SentencePiece model.

        Args:
            model_proto: The bytes of a ``tokenizer.model`` file.

        Returns:
            The tokenizer.
        """
        return cls(model_proto)

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Writes ``tokenizer.model`` and ``tokenizer.json`` into a folder.

        ``tokenizer.json`` records the vocabulary size, the special ids and
        the SHA-256 fingerprint of the model, which :meth:`load` verifies.
        It is written last, each file whole or not at all (a temporary file
        renamed into place): its presence says the tokenizer is complete. A
        failed save (a full disk) removes both files, a previous tokenizer's
        included, so the folder never holds half a tokenizer.

        Args:
            directory: Folder to write to; created if missing. Existing
                tokenizer files in it are replaced; other files are kept.

        Returns:
            The folder, as a ``Path``.

        Raises:
            keras_transformer.files.FileWriteError: (an ``OSError``) when a
                file cannot be written; one line naming it and the cause.
        """
        directory = Path(directory)
        model_path, config_path = directory / _MODEL_FILE, directory / _CONFIG_FILE
        config = {
            "format_version": _FORMAT_VERSION,
            "vocabulary_size": self.vocabulary_size,
            "model_type": self.model_type,
            "pad_id": self.PAD_ID,
            "unk_id": self.UNK_ID,
            "start_id": self.START_ID,
            "end_id": self.END_ID,
            "fingerprint": self.fingerprint,
        }
        try:
            directory.mkdir(parents=True, exist_ok=True)
            # The marker goes first and comes back last: in between, the
            # folder holds no complete tokenizer, never a mismatched one.
            config_path.unlink(missing_ok=True)
            files.write_atomically(model_path, self._proto)
            files.write_atomically(config_path, json.dumps(config, indent=2) + "\n")
        except OSError as e:
            for path in (config_path, model_path):
                with contextlib.suppress(OSError):
                    path.unlink(missing_ok=True)
            cause = e.__cause__ if isinstance(e.__cause__, OSError) else e
            failed = Path(getattr(e, "filename", None) or model_path)
            raise files.write_error(
                failed,
                cause,
                kept=f"{directory} holds no tokenizer now (no partial one is kept)",
            ) from e
        return directory

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> SubwordTokenizer:
        """Reads a tokenizer written by :meth:`save`.

        Args:
            directory: Folder holding ``tokenizer.model`` and
                ``tokenizer.json``.

        Returns:
            The tokenizer.

        Raises:
            FileNotFoundError: If a file is missing, e.g. ``tokenizer.json``
                after a save that stopped half way (written by a version
                before saves were atomic); the message says what to do.
            ValueError: If ``tokenizer.json`` is damaged (not a JSON object),
                or ``tokenizer.model`` does not match the fingerprint or
                vocabulary size recorded in it; the message names the file.
        """
        directory = Path(directory)
        model_path, config_path = directory / _MODEL_FILE, directory / _CONFIG_FILE
        if model_path.is_file() and not config_path.is_file():
            raise FileNotFoundError(
                f"{directory} holds {_MODEL_FILE} but no {_CONFIG_FILE}: a save "
                "stopped half way (e.g. on a full disk), so the tokenizer is "
                f"incomplete. Delete {directory} and learn it again (safe while "
                "its run has no checkpoint: training relearns the same one), or "
                "restore the folder from a copy of the run."
            )
        relearn = (
            f"Restore {directory} from a copy; a training run's tokenizer can "
            "also be deleted and learned again (`keras-transformer train "
            "--workdir <the run>` learns the same one from the run's data and "
            "checks it against the run's checkpoints), an export's exported again."
        )
        if config_path.is_file() and not model_path.is_file():
            raise FileNotFoundError(
                f"{directory} holds {_CONFIG_FILE} but no {_MODEL_FILE} (the "
                f"vocabulary itself), so the tokenizer is incomplete. {relearn}"
            )
        for path in (model_path, config_path):
            if not path.is_file():
                raise FileNotFoundError(
                    f"{path} not found. Pass the folder that "
                    "SubwordTokenizer.save(directory) wrote (it holds "
                    f"{_MODEL_FILE} and {_CONFIG_FILE})."
                )
        config = _read_tokenizer_config(config_path)
        try:
            tokenizer = cls(model_path.read_bytes())
        except (TypeError, ValueError) as e:
            size = model_path.stat().st_size
            raise ValueError(
                f"{model_path} is damaged: its {size} bytes are not a "
                f"SentencePiece model. {relearn}"
            ) from e
        if config.get("fingerprint") != tokenizer.fingerprint:
            raise ValueError(
                f"{model_path} does not match the fingerprint recorded in "
                f"{config_path} ({config.get('fingerprint')!r} expected, "
                f"{tokenizer.fingerprint!r} found): the files come from different "
                "tokenizers. Save the tokenizer again, or restore both files "
                "from the same run."
            )
        recorded = config.get("vocabulary_size")
        if recorded != tokenizer.vocabulary_size:
            raise ValueError(
                f"{config_path} records vocabulary_size={recorded!r} but "
                f"{model_path} holds {tokenizer.vocabulary_size} pieces: the files "
                "come from different tokenizers. Save the tokenizer again, or "
                "restore both files from the same run."
            )
        return tokenizer

    # -- properties ---------------------------------------------------------

    @property
    def vocabulary_size(self) -> int:
        """Number of ids, special ids included."""
        return self._processor.get_piece_size()

    @property
    def fingerprint(self) -> str:
        """SHA-256 hex digest of the serialized model; identifies the vocabulary."""
        return self._fingerprint

    @property
    def model_proto(self) -> bytes:
        """The serialized SentencePiece model."""
        return self._proto

    @property
    def model_type(self) -> str:
        """``"unigram"`` or ``"bpe"`` (or another SentencePiece model type)."""
        return self._model_type

    @property
    def pad_id(self) -> int:
        """Padding id, 0."""
        return self.PAD_ID

    @property
    def unk_id(self) -> int:
        """Unknown-piece id, 1."""
        return self.UNK_ID

    @property
    def start_id(self) -> int:
        """Start-of-sequence id (``<s>``), 2."""
        return self.START_ID

    @property
    def end_id(self) -> int:
        """End-of-sequence id (``</s>``), 3."""
        return self.END_ID

    def id_to_piece(self, token_id: int) -> str:
        """Returns the subword piece of an id, e.g. ``"▁Hund"``."""
        if not 0 <= token_id < self.vocabulary_size:
            raise ValueError(
                f"token id {token_id} is outside the vocabulary "
                f"[0, {self.vocabulary_size})."
            )
        return self._processor.id_to_piece(token_id)

    def check_compatible(
        self,
        expected_vocabulary_size: int,
        expected_fingerprint: str | None = None,
        *,
        expected_by: str = "the model",
    ) -> None:
        """Checks that this tokenizer is the one a model was trained with.

        Args:
            expected_vocabulary_size: Vocabulary size of the model's
                embedding (from the model, its checkpoint or config).
            expected_fingerprint: The fingerprint recorded with the
                checkpoint, if any.
            expected_by: what expects them, for the message (``"the
                model"``, ``"the checkpoint"``, a file).

        Raises:
            ValueError: If the size or the fingerprint differs.
        """
        problems = self.compatibility_problems(
            expected_vocabulary_size, expected_fingerprint, expected_by=expected_by
        )
        if problems:
            raise ValueError(
                f"The tokenizer vocabulary does not match {expected_by}: "
                + "; ".join(problems)
                + ". Token ids would mean different pieces. Load the tokenizer "
                f"{expected_by} was made with (SubwordTokenizer.load(<the "
                "tokenizer/ folder of its run or export>)), or train a new model "
                "with this tokenizer."
            )

    def compatibility_problems(
        self,
        expected_vocabulary_size: int,
        expected_fingerprint: str | None = None,
        *,
        expected_by: str = "the checkpoint",
    ) -> list[str]:
        """What differs from the tokenizer a model was trained with (its
        vocabulary size, its fingerprint), in words, each saying what
        `expected_by` expects; empty when nothing differs. `check_compatible`
        raises them."""
        problems = []
        if expected_vocabulary_size != self.vocabulary_size:
            problems.append(
                f"{expected_by} expects vocabulary_size={expected_vocabulary_size} "
                f"but this tokenizer has {self.vocabulary_size}"
            )
        if (
            expected_fingerprint is not None
            and expected_fingerprint != self.fingerprint
        ):
            problems.append(
                f"{expected_by} expects tokenizer fingerprint "
                f"{expected_fingerprint[:12]}… but this tokenizer's is "
                f"{self.fingerprint[:12]}…"
            )
        return problems

    # -- in-graph ------------------------------------------------------------

    def tokenize(self, strings: tf.Tensor | Sequence[str] | str) -> tf.RaggedTensor:
        """Splits strings into subword ids, without start or end ids.

        Works eagerly and inside ``tf.function`` / ``tf.data``.

        Args:
            strings: A ``tf.string`` tensor of any rank, or Python strings.

        Returns:
            ``int32`` ids: a ``tf.RaggedTensor`` of shape ``[..., (tokens)]``
            (``int64`` row splits) for an input of rank >= 1; a 1-D
            ``tf.Tensor`` for a scalar.
        """
        strings = tf.convert_to_tensor(strings, dtype=tf.string)
        ids = self._tokenizer.tokenize(strings)
        if isinstance(ids, tf.RaggedTensor):
            # One row-split dtype whichever op tokenized, so that batches of
            # either kind can be concatenated.
            ids = ids.with_row_splits_dtype(tf.int64)
        return ids

    def detokenize(self, ids: tf.Tensor | tf.RaggedTensor) -> tf.Tensor:
        """Turns ids back into strings.

        Padding and start ids are ignored, and each sequence ends at its
        first end id (what follows it, e.g. a decoder's output after it
        finished, is dropped).

        Args:
            ids: Integer ids of shape ``[tokens]`` or ``[batch, tokens]``,
                dense or ragged.

        Returns:
            A scalar ``tf.string`` for a 1-D input, else a ``[batch]`` tensor.
        """
        if isinstance(ids, tf.RaggedTensor):
            if ids.shape.rank != 2:
                raise ValueError(
                    f"detokenize needs ids of shape [batch, (tokens)], got rank "
                    f"{ids.shape.rank}."
                )
            dense = ids.to_tensor(default_value=self.PAD_ID)
            return self._detokenize_dense(tf.cast(dense, tf.int32))
        ids = tf.convert_to_tensor(ids)
        if not ids.dtype.is_integer:
            raise TypeError(f"detokenize needs integer ids, got {ids.dtype.name}.")
        ids = tf.cast(ids, tf.int32)
        if ids.shape.rank == 1:
            return self._detokenize_dense(ids[tf.newaxis])[0]
        if ids.shape.rank != 2:
            raise ValueError(
                f"detokenize needs ids of shape [tokens] or [batch, tokens], got "
                f"shape {ids.shape}."
            )
        return self._detokenize_dense(ids)

    def _detokenize_dense(self, ids: tf.Tensor) -> tf.Tensor:
        before_end = tf.math.cumsum(tf.cast(ids == self.END_ID, tf.int32), axis=1) == 0
        keep = before_end & (ids != self.PAD_ID) & (ids != self.START_ID)
        return self._tokenizer.detokenize(tf.ragged.boolean_mask(ids, keep))

    # -- Python helpers -------------------------------------------------------

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Tokenizes Python strings into lists of ids (no start or end ids).

        Gives the same ids as :meth:`tokenize`.

        Args:
            texts: Sentences.

        Returns:
            One list of ids per sentence.
        """
        if isinstance(texts, str):
            raise TypeError(
                "encode takes a list of strings; wrap one string in a list."
            )
        return self._processor.encode(list(texts), out_type=int)

    def unknown_pieces(self, text: str) -> list[str]:
        """The parts of `text` that no piece of the vocabulary holds, in order:
        they encode to ``UNK_ID`` and decode as ``" ⁇ "``.

        Example:
        >>> tokenizer.unknown_pieces("zzz 🦄")  # doctest: +SKIP
        ['🦄']
        """
        ids = self._processor.encode(text, out_type=int)
        pieces = self._processor.encode(text, out_type=str)
        return [
            piece.replace("\u2581", " ").strip() or piece
            for token_id, piece in zip(ids, pieces, strict=True)
            if token_id == self.UNK_ID
        ]

    def decode(self, ids: Sequence[Sequence[int]]) -> list[str]:
        """Turns lists of ids back into strings, like :meth:`detokenize`.

        Args:
            ids: One sequence of ids per sentence.

        Returns:
            One string per sequence.
        """
        cleaned: list[list[int]] = []
        for sequence in ids:
            kept = []
            for token_id in sequence:
                token_id = int(token_id)
                if token_id == self.END_ID:
                    break
                if token_id not in (self.PAD_ID, self.START_ID):
                    kept.append(token_id)
            cleaned.append(kept)
        if not cleaned:
            return []
        return self._processor.decode(cleaned)

    def __repr__(self) -> str:
        return (
            f"SubwordTokenizer(vocabulary_size={self.vocabulary_size}, "
            f"model_type={self.model_type!r}, fingerprint={self.fingerprint[:12]})"
        )


def _read_tokenizer_config(path: Path) -> dict[str, Any]:
    """The content of a ``tokenizer.json``; a damaged one (not UTF-8 JSON
    text holding an object) is a one-line `ValueError` naming the file."""
    return files.read_json_object(
        path,
        "the tokenizer's record is damaged. Restore the run's tokenizer folder "
        "from a copy; while the run has no checkpoint, deleting the folder is "
        "safe too (training learns the same tokenizer again).",
    )


def _fixed_options(cls: type[SubwordTokenizer]) -> dict[str, Any]:
    """The SentencePiece trainer options that `train` does not take."""
    return {
        "pad_id": cls.PAD_ID,
        "unk_id": cls.UNK_ID,
        "bos_id": cls.START_ID,
        "eos_id": cls.END_ID,
        "minloglevel": 2,
        # SentencePiece gets exactly the sentences chosen here: its own
        # sampling (input_sentence_size with shuffle_input_sentence) is
        # seeded per process, not by set_random_generator_seed.
        "input_sentence_size": 0,
        "shuffle_input_sentence": False,
    }
