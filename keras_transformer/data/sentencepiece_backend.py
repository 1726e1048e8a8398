"""SentencePiece underneath `SubwordTokenizer`: learning and the in-graph ops.

Learning (`learn_model`, Kudo & Richardson, 2018) is deterministic: the
sentences are sampled here from a seed (`sample_sentences`), never by
SentencePiece, so one call gives one model in every process. The ops
(`in_graph_tokenizer`) are tensorflow-text's: ``FastSentencepieceTokenizer``
for a unigram vocabulary, ``SentencepieceTokenizer`` with its model in a
shared resource for BPE and byte fallback.
"""

from __future__ import annotations

import heapq
import io
import re
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

import numpy as np
import sentencepiece as spm
import tensorflow as tf
import tensorflow_text as tf_text
from sentencepiece import sentencepiece_model_pb2

MODEL_TYPES = ("unigram", "bpe")


def sample_sentences(sentences: Iterable[str], size: int, seed: int) -> list[str]:
    """The `size` sentences of a seeded random sample, in their original order.

    Sentence ``i`` gets the key ``i``-th 64-bit output of ``PCG64(seed)``
    (numpy keeps a bit generator's stream the same across versions and
    machines) and the `size` smallest keys are kept: a uniform sample without
    replacement that depends only on the seed and the sentences, read in one
    streaming pass (memory for `size` sentences only).
    """
    generator = np.random.PCG64(seed)
    chunk = 65_536
    keys: Iterator[int] = iter(())
    largest_kept: list[tuple[int, int, str]] = []  # (-key, index, sentence)
    for index, sentence in enumerate(sentences):
        if index % chunk == 0:
            keys = iter(generator.random_raw(chunk).tolist())
        entry = (-next(keys), index, sentence)
        if len(largest_kept) < size:
            heapq.heappush(largest_kept, entry)
        elif entry[0] > largest_kept[0][0]:
            heapq.heapreplace(largest_kept, entry)
    return [sentence for _, _, sentence in sorted(largest_kept, key=lambda e: e[1])]


class InGraphTokenizer(Protocol):
    """What ``SubwordTokenizer`` calls: tensorflow-text's tokenizer interface."""

    def tokenize(self, inputs: tf.Tensor) -> tf.RaggedTensor: ...

    def detokenize(self, inputs: tf.RaggedTensor) -> tf.Tensor: ...


def _fast_op_applies(model: sentencepiece_model_pb2.ModelProto) -> bool:
    """Whether ``FastSentencepieceTokenizer`` gives SentencePiece's ids.

    It runs the unigram model's best segmentation; a BPE model (merges in
    order) or a byte-fallback model (unknown characters as UTF-8 bytes) come
    out with other ids.
    """
    spec = model.trainer_spec
    return (
        spec.model_type == sentencepiece_model_pb2.TrainerSpec.UNIGRAM
        and not spec.byte_fallback
    )


def _shared_resource_tokenizer(
    model_proto: bytes, fingerprint: str
) -> tf_text.SentencepieceTokenizer:
    """``tf_text.SentencepieceTokenizer`` with its model in a shared resource.

    tensorflow-text creates the model resource as owned by the op kernel that
    built it, so clearing TensorFlow's eager kernel cache deletes it, and
    ``tf.random.set_seed`` / ``keras.utils.set_random_seed`` clear that cache:
    afterwards every tokenization fails with "Resource ... does not exist".
    A ``shared_name`` (derived from the model's fingerprint) makes the
    resource live in the resource manager for the life of the process, where
    a re-created kernel finds it again; tokenizers of the same model share
    it. tensorflow-text has no public argument for the shared name, hence the
    private classes below; only BPE and byte-fallback models need them (see
    `_fast_op_applies`).
    """
    from tensorflow_text.python.ops import sentencepiece_tokenizer as tf_text_sp

    class SharedResource(tf_text_sp._SentencepieceModelResource):
        def __init__(self, model: bytes, shared_name: str) -> None:
            self._shared_name = shared_name
            super().__init__(model, None)

        def _create_resource(self) -> tf.Tensor:
            return tf_text_sp.gen_sentencepiece_tokenizer.sentencepiece_op(
                model=self._model, shared_name=self._shared_name
            )

    tokenizer = tf_text.SentencepieceTokenizer(
        model=model_proto, out_type=tf.int32, add_bos=False, add_eos=False
    )
    tokenizer._model_resource = SharedResource(
        model_proto, f"keras_transformer_sentencepiece_{fingerprint[:32]}"
    )
    return tokenizer


def in_graph_tokenizer(
    model_proto: bytes, model: sentencepiece_model_pb2.ModelProto, fingerprint: str
) -> InGraphTokenizer:
    if _fast_op_applies(model):
        # The model is a constant tensor: no resource, nothing for
        # tf.random.set_seed to delete, and a SavedModel holds it as a constant.
        return tf_text.FastSentencepieceTokenizer(model_proto)
    return _shared_resource_tokenizer(model_proto, fingerprint)


def check_training_arguments(
    texts: Iterable[str],
    vocabulary_size: int,
    model_type: str,
    character_coverage: float,
    seed: Any,
    max_sentences: int | None,
    byte_fallback: bool,
) -> None:
    """The argument checks of `SubwordTokenizer.train` (one-line errors)."""
    if model_type not in MODEL_TYPES:
        raise ValueError(
            f"model_type={model_type!r} is not supported; use one of {MODEL_TYPES}."
        )
    minimum = 5 + (256 if byte_fallback else 0)
    if vocabulary_size < minimum:
        raise ValueError(
            f"vocabulary_size={vocabulary_size} is too small; it must be at "
            f"least {minimum} (four special ids plus pieces)."
        )
    if not 0.0 < character_coverage <= 1.0:
        raise ValueError(
            f"character_coverage must be in (0, 1], got {character_coverage}."
        )
    if max_sentences is not None and max_sentences < 1:
        raise ValueError(
            f"max_sentences must be positive or None, got {max_sentences}."
        )
    if isinstance(texts, str):
        raise TypeError(
            "texts must be an iterable of sentences, not a single str; wrap "
            "it in a list."
        )
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}.")


def non_empty_sentences(texts: Iterable[str], counter: dict[str, int]) -> Iterator[str]:
    """The non-empty sentences of `texts`, counted in ``counter["sentences"]``."""
    for text in texts:
        if not isinstance(text, str):
            raise TypeError(
                f"texts must yield str, got {type(text).__name__}; decode bytes first."
            )
        if text.strip():
            counter["sentences"] += 1
            yield text


def learn_model(
    chosen: Iterable[str],
    options: dict[str, Any],
    counter: dict[str, int],
    max_sentences: int | None,
) -> bytes:
    """The serialized SentencePiece model learned on `chosen`; SentencePiece's
    failures as one-line `ValueError`s (no text, too large a vocabulary)."""
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(chosen), model_writer=model, **options
        )
    except RuntimeError as e:
        if counter["sentences"] == 0:
            raise ValueError(
                "Cannot train a tokenizer on no text: texts held no non-empty sentence."
            ) from e
        message = str(e)
        used = min(counter["sentences"], max_sentences or counter["sentences"])
        needed = re.search(r"smaller than required_chars\. *\d+ vs (\d+)", message)
        if needed:
            raise ValueError(
                f"vocabulary_size={options['vocab_size']} is too small for the "
                f"characters of the training text ({message}). Raise "
                f"vocabulary_size to at least {needed.group(1)} (a run's "
                "data.vocabulary_size: --set data.vocabulary_size=N)."
            ) from e
        if "Vocabulary size too high" in message or "vocab_size" in message:
            most = re.search(r"<= *(\d+)", message)
            limit = f" to at most {most.group(1)}" if most else ""
            raise ValueError(
                f"vocabulary_size={options['vocab_size']} is too large for "
                f"{used} training sentences ({message}). Lower vocabulary_size"
                f"{limit} (a run's data.vocabulary_size: --set "
                "data.vocabulary_size=N) or train on more text."
            ) from e
        raise ValueError(f"SentencePiece training failed: {message}") from e
    return model.getvalue()
