"""Tests of keras_transformer.data.tokenizer."""

from __future__ import annotations

import errno
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tensorflow as tf
import tensorflow_text as tf_text

from keras_transformer.data import SubwordTokenizer, TextPairs
from keras_transformer.data.sentencepiece_backend import sample_sentences
from keras_transformer.files import FileWriteError

FIXTURES = Path(__file__).resolve().parent / "fixtures"
#: Inputs the SentencePiece library and the in-graph ops must agree on:
#: normalisation (NFKC, whitespace, control characters), unknown characters,
#: empty and long lines.
EDGE_CASES = [
    "",
    "   ",
    " a  b\t c\n",
    "ﬁne ＡＢＣ",
    "汉字 unknown ☃",
    "\x01ctrl\x7f",
    "é vs e\u0301",
    "  lead",
    "trail  ",
    "a" * 500,
]

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
    # A damaged or missing model file is named (the parser's error named none).
    model = directory / "tokenizer.model"
    model.write_bytes(tokenizer.model_proto[:50])
    with pytest.raises(ValueError, match=f"{model} is damaged: its 50 bytes are not"):
        SubwordTokenizer.load(directory)
    model.unlink()
    with pytest.raises(
        FileNotFoundError, match="holds tokenizer.json but no tokenizer"
    ):
        SubwordTokenizer.load(directory)
    # A size in tokenizer.json that the model file does not have (it said
    # "does not match the checkpoint" where there was none).
    model.write_bytes(tokenizer.model_proto)
    config.update(fingerprint=tokenizer.fingerprint, vocabulary_size=999)
    (directory / "tokenizer.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="records vocabulary_size=999 but .* holds"):
        SubwordTokenizer.load(directory)


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
    assert "does not match the model: the model expects" in message
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
    with pytest.raises(ValueError, match="vocabulary_size=5000 is too large") as e:
        SubwordTokenizer.train(texts[:20], vocabulary_size=5000)
    # How far to lower it (SentencePiece's bound), and the setting of a run.
    most = re.search(r"<= *(\d+)", str(e.value)).group(1)
    assert f"Lower vocabulary_size to at most {most} (a run's data." in str(e.value)
    # Fewer pieces than the text has characters was "too large ... Lower".
    with pytest.raises(ValueError, match="vocabulary_size=10 is too small") as e:
        SubwordTokenizer.train(texts, vocabulary_size=10)
    least = int(re.search(r"Raise vocabulary_size to at least (\d+) ", str(e.value))[1])
    assert SubwordTokenizer.train(texts, vocabulary_size=least).vocabulary_size == least
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


@pytest.fixture(scope="module")
def tokenizers(multi30k_val: TextPairs, tokenizer: SubwordTokenizer) -> dict:
    """One tokenizer per model kind: unigram, BPE, and both with byte fallback."""
    texts = [*multi30k_val.sources, *multi30k_val.targets]
    return {
        "unigram": tokenizer,
        "bpe": SubwordTokenizer.train(texts, 1000, model_type="bpe"),
        "unigram_byte_fallback": SubwordTokenizer.train(
            texts, 1000, byte_fallback=True
        ),
        "bpe_byte_fallback": SubwordTokenizer.train(
            texts, 1000, model_type="bpe", byte_fallback=True
        ),
    }


KINDS = ["unigram", "bpe", "unigram_byte_fallback", "bpe_byte_fallback"]


@pytest.mark.parametrize("kind", KINDS)
def test_in_graph_ids_equal_the_sentencepiece_library(
    tokenizers: dict, kind: str, shared_data_dir: Path
) -> None:
    """The TensorFlow ops give the ids and text of the SentencePiece library.

    `encode` and `decode` call the library itself; `tokenize` and
    `detokenize` the tensorflow-text ops that training, decoding and export
    use. Run folders and exports hold only the SentencePiece model, so
    whichever op applies it must agree with the library on every line.
    """
    from keras_transformer.data import load_multi30k, load_tatoeba_spa_eng

    tokenizer = tokenizers[kind]
    test = load_multi30k(
        "test_2016_flickr", "de", "en", data_dir=shared_data_dir / "multi30k"
    )
    spanish = load_tatoeba_spa_eng(
        "test", data_dir=shared_data_dir / "tatoeba_spa_eng"
    ).take(1000)
    texts = [*test.sources, *test.targets, *spanish.targets, *EDGE_CASES]
    ids = tokenizer.tokenize(texts)
    expected = tokenizer.encode(texts)
    assert ids.to_list() == expected
    if "byte_fallback" not in kind:  # otherwise every character is known
        assert any(tokenizer.UNK_ID in row for row in expected)  # 汉字, ☃
    dense = ids.to_tensor()
    assert [t.decode() for t in tokenizer.detokenize(dense).numpy()] == (
        tokenizer.decode(expected)
    )


def test_unigram_vocabularies_use_the_public_fast_op(tokenizers: dict) -> None:
    """The default kind needs no private tensorflow-text class (see the module)."""
    assert isinstance(
        tokenizers["unigram"]._tokenizer, tf_text.FastSentencepieceTokenizer
    )
    for kind in KINDS[1:]:
        assert isinstance(tokenizers[kind]._tokenizer, tf_text.SentencepieceTokenizer)


def test_files_written_before_read_into_the_same_ids(tmp_path: Path) -> None:
    """A tokenizer saved by an earlier version (see the fixture's script)."""
    folder = FIXTURES / "tokenizer_unigram"
    expected = json.loads((folder / "expected.json").read_text("utf-8"))
    loaded = SubwordTokenizer.load(folder)  # checks the recorded fingerprint
    assert loaded.fingerprint == expected["fingerprint"]
    assert loaded.vocabulary_size == expected["settings"]["vocabulary_size"]
    ids = loaded.tokenize(expected["probes"])
    assert ids.to_list() == expected["ids"]
    assert loaded.encode(expected["probes"]) == expected["ids"]
    assert [t.decode() for t in loaded.detokenize(ids).numpy()] == (
        expected["detokenized"]
    )
    # Saving it again writes the same bytes.
    again = loaded.save(tmp_path / "again")
    for name in ("tokenizer.model", "tokenizer.json"):
        assert (again / name).read_bytes() == (folder / name).read_bytes()


@pytest.mark.parametrize("kind", ["unigram", "bpe"])
def test_exports_inside_saved_model_of_each_kind(
    tokenizers: dict, kind: str, tmp_path: Path
) -> None:
    tokenizer = tokenizers[kind]

    class RoundTrip(tf.Module):
        def __init__(self, tokenizer: SubwordTokenizer) -> None:
            super().__init__()
            self.tokenizer = tokenizer

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def ids(self, texts: tf.Tensor) -> tf.Tensor:
            return self.tokenizer.tokenize(texts).to_tensor()

    tf.saved_model.save(RoundTrip(tokenizer), str(tmp_path / "model"))
    restored = tf.saved_model.load(str(tmp_path / "model"))
    tf.random.set_seed(3)  # clears the kernel cache of the restored graph too
    got = restored.ids(tf.constant(SENTENCES)).numpy().tolist()
    assert [[i for i in row if i] for row in got] == tokenizer.encode(SENTENCES)


@pytest.mark.parametrize("kind", KINDS)
def test_survives_clearing_the_kernel_cache(tokenizers: dict, kind: str) -> None:
    """tf.random.set_seed clears TF's kernel cache, which must not kill the model."""
    tokenizer = tokenizers[kind]
    before = tokenizer.tokenize(SENTENCES).to_list()
    dataset = tf.data.Dataset.from_tensor_slices(SENTENCES).map(tokenizer.tokenize)
    tf.random.set_seed(7)
    fresh = SubwordTokenizer(tokenizer.model_proto)  # shares the model resource
    tf.random.set_seed(8)
    del fresh
    assert tokenizer.tokenize(SENTENCES).to_list() == before
    assert [ids.tolist() for ids in dataset.as_numpy_iterator()] == before


# -- determinism across processes -------------------------------------------

#: Learns sampled vocabularies on Multi30k in a fresh process and saves them.
_LEARN_IN_A_PROCESS = """
import sys
from keras_transformer.data import SubwordTokenizer, load_multi30k
data_dir, out, *seeds = sys.argv[1:]
pairs = load_multi30k("train", data_dir=data_dir).take(6000)
texts = [*pairs.sources, *pairs.targets]
for seed in seeds:
    tokenizer = SubwordTokenizer.train(
        texts, vocabulary_size=1000, seed=int(seed), max_sentences=3000
    )
    tokenizer.save(f"{out}/seed_{seed}")
"""


@pytest.mark.slow  # two processes learning tokenizers: about 18 s
def test_sampled_vocabulary_is_the_same_in_two_processes(
    multi30k_dir: Path, tmp_path: Path
) -> None:
    """12,000 sentences, 3,000 sampled, seed 0: byte-identical models.

    SentencePiece's own sampling (input_sentence_size) drew a new sample in
    every process whatever the seed; the sample is now drawn from the seed.
    """
    from tests.training.helpers import REPO_ROOT, subprocess_env

    for name, seeds in (("first", ["0", "1"]), ("second", ["0"])):
        process = subprocess.run(
            [sys.executable, "-c", _LEARN_IN_A_PROCESS, str(multi30k_dir)]
            + [str(tmp_path / name), *seeds],
            cwd=REPO_ROOT,
            env=subprocess_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert process.returncode == 0, process.stderr[-3000:]
    first = (tmp_path / "first" / "seed_0" / "tokenizer.model").read_bytes()
    second = (tmp_path / "second" / "seed_0" / "tokenizer.model").read_bytes()
    assert first == second
    other_seed = (tmp_path / "first" / "seed_1" / "tokenizer.model").read_bytes()
    assert other_seed != first  # the seed chooses the sample


def test_sample_is_seeded_uniform_and_keeps_the_order() -> None:
    sentences = [f"sentence {i}" for i in range(1000)]
    sample = sample_sentences(iter(sentences), 100, seed=0)
    assert len(sample) == len(set(sample)) == 100
    assert sample == sorted(sample, key=sentences.index)  # corpus order
    assert sample_sentences(sentences, 100, seed=0) == sample
    assert sample_sentences(sentences, 100, seed=1) != sample
    # Spread over the corpus, not its head: about 10 in each tenth.
    tenths = [sentences.index(s) // 100 for s in sample]
    assert all(2 <= tenths.count(t) <= 25 for t in range(10))
    assert sample_sentences(sentences[:50], 100, seed=0) == sentences[:50]
    # Streamed past the generator's chunk, and still a function of the seed.
    many = (str(i) for i in range(70_000))
    assert sample_sentences(many, 3, seed=4) == sample_sentences(
        (str(i) for i in range(70_000)), 3, 4
    )


def test_max_sentences_above_the_corpus_trains_on_all_of_it(
    multi30k_val: TextPairs,
) -> None:
    texts = list(multi30k_val.take(300).sources)
    whole = SubwordTokenizer.train(texts, vocabulary_size=300)
    capped = SubwordTokenizer.train(texts, vocabulary_size=300, max_sentences=300)
    assert capped.fingerprint == whole.fingerprint
    sampled = SubwordTokenizer.train(texts, vocabulary_size=300, max_sentences=200)
    assert sampled.fingerprint != whole.fingerprint
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        SubwordTokenizer.train(texts, vocabulary_size=300, seed=-1)


# -- a save that fails half way ---------------------------------------------


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


@pytest.mark.parametrize("failing", ["tokenizer.model", "tokenizer.json"])
def test_failed_save_leaves_no_half_tokenizer(
    tokenizer: SubwordTokenizer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    failing: str,
) -> None:
    """The disk fills up while one file is written: neither file is left."""
    import keras_transformer.files as files_module

    directory = tmp_path / "tok"
    directory.mkdir()
    (directory / "notes.txt").write_text("not the tokenizer's")
    flush = files_module._fsync_file

    def full_disk(path: Path) -> None:
        if Path(path).name.endswith(failing):
            raise OSError(errno.ENOSPC, "No space left on device")
        flush(path)

    monkeypatch.setattr(files_module, "_fsync_file", full_disk)
    with pytest.raises(FileWriteError) as error:
        tokenizer.save(directory)
    message = str(error.value)
    assert "\n" not in message
    assert failing in message and "no space left on the device" in message
    assert "holds no tokenizer now" in message and "Free disk space" in message
    assert error.value.errno == errno.ENOSPC
    assert _leftovers(directory) == ["notes.txt"]  # no temporaries either
    with pytest.raises(FileNotFoundError, match="tokenizer.model not found"):
        SubwordTokenizer.load(directory)

    monkeypatch.setattr(files_module, "_fsync_file", flush)  # space freed
    tokenizer.save(directory)
    assert SubwordTokenizer.load(directory).fingerprint == tokenizer.fingerprint
    assert _leftovers(directory) == ["notes.txt", "tokenizer.json", "tokenizer.model"]


def test_half_written_folder_says_what_happened(
    tokenizer: SubwordTokenizer, tmp_path: Path
) -> None:
    """What a save before this version left on a full disk: a cut model."""
    directory = tmp_path / "tokenizer"
    directory.mkdir()
    proto = tokenizer.model_proto
    (directory / "tokenizer.model").write_bytes(proto[: len(proto) // 2])
    with pytest.raises(FileNotFoundError) as error:
        SubwordTokenizer.load(directory)
    message = str(error.value)
    assert "\n" not in message
    assert "holds tokenizer.model but no tokenizer.json" in message
    assert "stopped half way" in message
    assert f"Delete {directory}" in message and "no checkpoint" in message


def test_full_tmpfs_leaves_no_half_tokenizer(
    tokenizer: SubwordTokenizer, tmp_path: Path
) -> None:
    """The same on a real full disk: a 256 KiB tmpfs, nearly filled."""
    mount = tmp_path / "small_disk"
    mount.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {mounted.stderr.strip()}")
    try:
        filler = mount / "filler"
        free = shutil.disk_usage(mount).free
        filler.write_bytes(b"\0" * (free - 8192))  # two pages left
        assert shutil.disk_usage(mount).free < len(tokenizer.model_proto)
        directory = mount / "tokenizer"
        with pytest.raises(FileWriteError, match="no space left on the device"):
            tokenizer.save(directory)
        assert _leftovers(directory) == []
        assert _leftovers(mount) == ["filler", "tokenizer"]
        filler.unlink()
        tokenizer.save(directory)
        assert SubwordTokenizer.load(directory).fingerprint == tokenizer.fingerprint
    finally:
        subprocess.run(["umount", str(mount)], check=True)
