"""Tests of keras_transformer.data.tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tensorflow as tf

from keras_transformer.data import SubwordTokenizer, TextPairs

SENTENCES = [
    "Ein Mann fährt mit dem Fahrrad über die Straße.",
    "Zwei Hunde spielen im Schnee.",
    "A woman in a red dress is walking down the street.",
    "El niño come una manzana en el año nuevo.",
    "¿Dónde está la señora?",
]


def test_special_ids(tokenizer: SubwordTokenizer) -> None:
    assert (
        tokenizer.PAD_ID,
        tokenizer.UNK_ID,
        tokenizer.START_ID,
        tokenizer.END_ID,
    ) == (
        0,
        1,
        2,
        3,
    )
    assert (
        tokenizer.pad_id,
        tokenizer.unk_id,
        tokenizer.start_id,
        tokenizer.end_id,
    ) == (
        0,
        1,
        2,
        3,
    )
    assert [tokenizer.id_to_piece(i) for i in range(4)] == [
        "<pad>",
        "<unk>",
        "<s>",
        "</s>",
    ]
    assert tokenizer.vocabulary_size == 1000
    assert tokenizer.model_type == "unigram"


def test_tokenize_matches_encode_and_round_trips(tokenizer: SubwordTokenizer) -> None:
    ids = tokenizer.tokenize(SENTENCES)
    assert isinstance(ids, tf.RaggedTensor) and ids.dtype == tf.int32
    assert ids.to_list() == tokenizer.encode(SENTENCES)
    flat = ids.flat_values.numpy()
    assert tokenizer.UNK_ID not in flat  # umlauts, ß, ñ, ¿ are all in the vocabulary
    assert not {tokenizer.START_ID, tokenizer.END_ID, tokenizer.PAD_ID} & set(flat)
    assert [s.decode() for s in tokenizer.detokenize(ids).numpy()] == SENTENCES
    assert tokenizer.decode(tokenizer.encode(SENTENCES)) == SENTENCES
    # Normalisation: outer whitespace is removed and inner runs collapse.
    assert tokenizer.decode(tokenizer.encode(["  Zwei   Hunde \t spielen "])) == [
        "Zwei Hunde spielen"
    ]
    # A scalar gives a 1-D dense tensor.
    assert tokenizer.tokenize(SENTENCES[0]).numpy().tolist() == ids[0].numpy().tolist()


def test_detokenize_stops_at_end(tokenizer: SubwordTokenizer) -> None:
    dog, cat = tokenizer.encode(["Ein Hund.", "Eine Katze."])
    start, end, pad = tokenizer.START_ID, tokenizer.END_ID, tokenizer.PAD_ID
    length = len(dog) + len(cat) + 4
    rows = [
        [start, *dog, end, *cat] + [pad] * (length - len(dog) - len(cat) - 2),
        [start, *cat, end] + [pad] * (length - len(cat) - 2),
    ]
    dense = tf.constant(rows, tf.int64)
    assert tokenizer.detokenize(dense).numpy().tolist() == [
        b"Ein Hund.",
        b"Eine Katze.",
    ]
    ragged = tf.ragged.constant([[start, *dog, end, *cat], [*cat]])
    assert tokenizer.detokenize(ragged).numpy().tolist() == [
        b"Ein Hund.",
        b"Eine Katze.",
    ]
    assert tokenizer.detokenize(tf.constant(rows[0])).numpy() == b"Ein Hund."
    assert tokenizer.decode(rows) == ["Ein Hund.", "Eine Katze."]


def test_detokenize_in_graph(tokenizer: SubwordTokenizer) -> None:
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def round_trip(texts: tf.Tensor) -> tf.Tensor:
        ids = tokenizer.tokenize(texts)
        return tokenizer.detokenize(ids.to_tensor())

    assert round_trip(tf.constant(SENTENCES[:2])).numpy().tolist() == [
        s.encode() for s in SENTENCES[:2]
    ]


def test_save_load_round_trip(tokenizer: SubwordTokenizer, tmp_path: Path) -> None:
    directory = tokenizer.save(tmp_path / "tok")
    config = json.loads((directory / "tokenizer.json").read_text())
    assert config["vocabulary_size"] == 1000
    assert config["fingerprint"] == tokenizer.fingerprint
    assert (
        config["pad_id"],
        config["unk_id"],
        config["start_id"],
        config["end_id"],
    ) == (
        0,
        1,
        2,
        3,
    )
    loaded = SubwordTokenizer.load(directory)
    assert loaded.fingerprint == tokenizer.fingerprint
    assert loaded.encode(SENTENCES) == tokenizer.encode(SENTENCES)
    assert (
        loaded.tokenize(SENTENCES).to_list() == tokenizer.tokenize(SENTENCES).to_list()
    )
    same = SubwordTokenizer.from_proto((directory / "tokenizer.model").read_bytes())
    assert same.fingerprint == tokenizer.fingerprint


def test_load_errors(tokenizer: SubwordTokenizer, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="tokenizer.model not found"):
        SubwordTokenizer.load(tmp_path)
    directory = tokenizer.save(tmp_path / "tok")
    config = json.loads((directory / "tokenizer.json").read_text())
    config["fingerprint"] = "0" * 64
    (directory / "tokenizer.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="does not match the fingerprint"):
        SubwordTokenizer.load(directory)
    with pytest.raises(ValueError, match="not a valid SentencePiece model"):
        SubwordTokenizer.from_proto(b"not a model")


def test_fingerprint_and_check_compatible(tokenizer: SubwordTokenizer) -> None:
    texts = [s for s in SENTENCES for _ in range(3)] + [
        "Ein Hund läuft.",
        "A dog runs.",
    ]
    other = SubwordTokenizer.train(texts, vocabulary_size=60, model_type="bpe")
    assert other.model_type == "bpe"
    assert other.fingerprint != tokenizer.fingerprint
    tokenizer.check_compatible(1000, tokenizer.fingerprint)
    tokenizer.check_compatible(expected_vocabulary_size=1000)
    with pytest.raises(ValueError) as info:
        tokenizer.check_compatible(expected_vocabulary_size=8000)
    message = str(info.value)
    assert "does not match the checkpoint" in message
    assert "vocabulary_size=8000" in message and "1000" in message
    assert "SubwordTokenizer.load" in message
    with pytest.raises(ValueError, match="fingerprint"):
        tokenizer.check_compatible(1000, expected_fingerprint=other.fingerprint)


def test_train_is_deterministic_and_validates(multi30k_val: TextPairs) -> None:
    texts = list(multi30k_val.take(300).sources)
    first = SubwordTokenizer.train(texts, vocabulary_size=300)
    assert (
        SubwordTokenizer.train(texts, vocabulary_size=300).fingerprint
        == first.fingerprint
    )
    with pytest.raises(ValueError, match="vocabulary_size=5000 is too large"):
        SubwordTokenizer.train(texts[:20], vocabulary_size=5000)
    with pytest.raises(ValueError, match="model_type='word'.*'unigram', 'bpe'"):
        SubwordTokenizer.train(texts, 300, model_type="word")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no non-empty sentence"):
        SubwordTokenizer.train(["", "  "], vocabulary_size=300)


def test_exports_inside_saved_model(
    tokenizer: SubwordTokenizer, tmp_path: Path
) -> None:
    class Translator(tf.Module):
        def __init__(self, tokenizer: SubwordTokenizer) -> None:
            super().__init__()
            self.tokenizer = tokenizer

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def round_trip(self, texts: tf.Tensor) -> tf.Tensor:
            return self.tokenizer.detokenize(self.tokenizer.tokenize(texts))

    tf.saved_model.save(Translator(tokenizer), str(tmp_path / "model"))
    restored = tf.saved_model.load(str(tmp_path / "model"))
    out = restored.round_trip(tf.constant(SENTENCES[3:]))
    assert [s.decode() for s in out.numpy()] == SENTENCES[3:]


def test_survives_clearing_the_kernel_cache(tokenizer: SubwordTokenizer) -> None:
    """tf.random.set_seed clears TF's kernel cache, which must not kill the model."""
    before = tokenizer.tokenize(SENTENCES).to_list()
    dataset = tf.data.Dataset.from_tensor_slices(SENTENCES).map(tokenizer.tokenize)
    tf.random.set_seed(7)
    fresh = SubwordTokenizer(tokenizer.model_proto)  # shares the model resource
    tf.random.set_seed(8)
    del fresh
    assert tokenizer.tokenize(SENTENCES).to_list() == before
    assert [ids.tolist() for ids in dataset.as_numpy_iterator()] == before
