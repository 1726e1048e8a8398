"""kt.translation: Translator, evaluate (sacreBLEU, chrF, TensorBoard); the commands."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import warnings
from pathlib import Path

import pytest
import sacrebleu
import tensorflow as tf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from keras_transformer import export, translation
from keras_transformer.cli import evaluate as evaluate_command
from keras_transformer.cli import export as export_command
from keras_transformer.cli import translate as translate_command
from keras_transformer.data import (
    SubwordTokenizer,
    TextPairs,
    batch_for_eval,
    synthetic_dates,
)
from keras_transformer.training.evaluation import translate as training_translate
from tests.export_helpers import tiny_model, tiny_translator

TEST = synthetic_dates(12, seed=21)
SOURCES, REFERENCES = list(TEST.sources), list(TEST.targets)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An export-style folder (model.keras + tokenizer/) of the tiny model."""
    model, tokenizer = tiny_translator()
    return export.save_model_and_tokenizer(
        model, tokenizer, tmp_path_factory.mktemp("model")
    )


def _parse(add_arguments, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_translate_lines_keeps_empty_lines_and_order(
    capsys: pytest.CaptureFixture[str],
) -> None:
    model, tokenizer = tiny_translator()
    lines = [SOURCES[0], "", SOURCES[1], "  \t ", SOURCES[2], ""]
    beam = translation.translate_lines(model, tokenizer, lines, progress=True)
    assert "6/6" in capsys.readouterr().out  # the progress bar
    assert len(beam) == len(lines)
    assert [bool(text) for text in beam] == [bool(line.strip()) for line in lines]
    # Greedy decoding is what training reports (training.evaluation.translate).
    greedy = translation.translate_lines(model, tokenizer, lines, beam_size=1)
    assert [text for text in greedy if text] == training_translate(
        model, tokenizer, [line for line in lines if line.strip()]
    )
    # Batching (sorted by length) does not change the outputs.
    one_by_one = [
        translation.translate_lines(model, tokenizer, [line])[0] for line in lines[:3]
    ]
    assert one_by_one == beam[:3]
    assert translation.translate_lines(model, tokenizer, []) == []
    assert translation.translate_lines(model, tokenizer, ["", " "]) == ["", ""]


def test_a_translator_tokenizes_each_line_once(monkeypatch) -> None:
    model, tokenizer = tiny_translator()
    translator = translation.Translator(model, tokenizer, beam_size=1, batch_size=2)
    expected = translator.translate(SOURCES[:5])
    calls = {"tokenize": 0}
    tokenize = tokenizer.tokenize

    def counting_tokenize(strings):
        calls["tokenize"] += 1
        return tokenize(strings)

    def no_python_encode(texts):
        raise AssertionError("the translator tokenizes in TensorFlow, once")

    monkeypatch.setattr(tokenizer, "tokenize", counting_tokenize)
    monkeypatch.setattr(tokenizer, "encode", no_python_encode)
    assert translator.translate(SOURCES[:5]) == expected
    assert calls["tokenize"] == 1  # one call for all lines, all batches


def test_translator_cuts_sources_like_the_export_and_batch_for_eval() -> None:
    model, tokenizer = tiny_translator()
    long = "Donnerstag, 5. Januar 2023 " * 10
    lines = ["", SOURCES[0], long, "  "]
    translator = translation.Translator(model, tokenizer, max_input_length=8)
    with pytest.warns(translation.SourceCutWarning, match="indices 1, 2;"):
        ids = translator.encode(lines)
    end = tokenizer.END_ID
    assert ids[0] == [end] and ids[3] == [end]
    assert ids[2] == tokenizer.encode([long])[0][:7] + [end]
    exported, is_empty = export.source_ids_from_strings(
        tokenizer, tf.constant(lines), max_input_length=8
    )
    assert is_empty.numpy().tolist() == [True, False, False, True]
    (batched, _), *_ = batch_for_eval(
        TextPairs(lines, lines), tokenizer, max_length=8
    ).as_numpy_iterator()
    for row, expected in enumerate(ids):
        padded = expected + [0] * (8 - len(expected))
        assert exported.numpy()[row].tolist() == padded
        assert batched[row].tolist() == padded
    with pytest.raises(ValueError, match="max_input_length"):
        translation.Translator(model, tokenizer, max_input_length=1)
    # Another vocabulary's ids would mean other pieces: sentencepiece's
    # "piece id is out of range" came only from the first translation.
    other = SubwordTokenizer.train(SOURCES * 4, vocabulary_size=60)
    with pytest.raises(ValueError, match="expects vocabulary_size=.* has 60"):
        translation.Translator(model, other)
    with pytest.raises(ValueError, match="does not match"):
        translation.Translator(model, tokenizer, ensemble=[tiny_model(other)])
    with pytest.raises(ValueError, match="alpha"):
        translation.Translator(model, tokenizer, alpha=-1.0)


def test_one_result_class_for_training_and_test_sets() -> None:
    from keras_transformer.training import evaluation

    assert evaluation.EvaluationResult is translation.EvaluationResult
    assert evaluation.Translation is translation.Translation
    model, tokenizer = tiny_translator()
    sources, references = SOURCES[:4], REFERENCES[:4]
    greedy = evaluation.evaluate_translations(
        model, tokenizer, TextPairs(tuple(sources), tuple(references)), split="v"
    )
    direct = translation.Translator(model, tokenizer, beam_size=1).evaluate(
        sources, references, split="v"
    )
    assert greedy.hypotheses == direct.hypotheses
    assert greedy.bleu == direct.bleu and greedy.beam_size == 1
    assert "greedy" in greedy.summary()
    scores = translation.score_translations(greedy.hypotheses, references)
    assert scores["bleu"] == greedy.bleu and scores["chrf"] == greedy.chrf
    with pytest.raises(ValueError, match="one of each"):
        translation.score_translations(["a"], ["a", "b"])
    # No sentence at all was sacrebleu's IndexError, also from evaluate.
    with pytest.raises(ValueError, match="There are no sentences to score"):
        translation.score_translations([], [])
    with pytest.raises(ValueError, match="There are no sentences to score"):
        translation.Translator(model, tokenizer, beam_size=1).evaluate([], [])


def test_evaluate_writes_hypotheses_and_scores_like_sacrebleu(tmp_path: Path) -> None:
    model, tokenizer = tiny_translator()
    hypotheses_path = tmp_path / "out" / "test.hyp.txt"
    result = translation.evaluate(
        model,
        SOURCES,
        REFERENCES,
        tokenizer=tokenizer,
        hypotheses_path=hypotheses_path,
        log_dir=tmp_path / "logs",
        step=7,
        split="dates_test",
    )
    hypotheses = hypotheses_path.read_text(encoding="utf-8").split("\n")
    assert hypotheses[-1] == "" and hypotheses[:-1] == result.hypotheses
    assert result.hypotheses == translation.translate_lines(model, tokenizer, SOURCES)
    bleu_metric, chrf_metric = sacrebleu.BLEU(), sacrebleu.CHRF()
    bleu = bleu_metric.corpus_score(result.hypotheses, [REFERENCES])
    chrf = chrf_metric.corpus_score(result.hypotheses, [REFERENCES])
    assert result.bleu == pytest.approx(bleu.score)
    assert result.chrf == pytest.approx(chrf.score)
    assert 0 < result.chrf <= 100
    assert result.bleu_signature == str(bleu_metric.get_signature())
    assert result.chrf_signature == str(chrf_metric.get_signature())
    assert result.bleu_signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert result.num_sentences == 12 and result.beam_size == 4
    assert "beam 4, alpha 0.6" in result.summary()
    assert result.to_dict()["bleu"] == result.bleu
    assert result.to_dict()["early_stop"] == "exact"  # the saved search says its rule

    events = EventAccumulator(str(tmp_path / "logs"))
    events.Reload()
    (bleu_event,) = events.Tensors("bleu")
    assert bleu_event.step == 7
    assert float(tf.make_ndarray(bleu_event.tensor_proto)) == pytest.approx(
        result.bleu, abs=1e-4
    )
    assert {"chrf", "exact_match", "chrf_signature"} <= set(events.Tags()["tensors"])
    (signature,) = events.Tensors("bleu_signature")
    assert tf.make_ndarray(signature.tensor_proto).item().decode() == (
        result.bleu_signature
    )


def test_evaluate_loads_a_folder_and_explains_mistakes(model_dir: Path) -> None:
    model, tokenizer = tiny_translator()
    from_folder = translation.evaluate(
        model_dir, SOURCES[:4], REFERENCES[:4], beam_size=1
    )
    from_model = translation.evaluate(
        model, SOURCES[:4], REFERENCES[:4], tokenizer=tokenizer, beam_size=1
    )
    assert from_folder.hypotheses == from_model.hypotheses
    assert from_folder.bleu == from_model.bleu and "greedy" in from_folder.summary()
    with pytest.raises(ValueError, match="one reference per source"):
        translation.evaluate(model, SOURCES, REFERENCES[:3], tokenizer=tokenizer)
    with pytest.raises(ValueError, match="tokenizer"):
        translation.evaluate(model, SOURCES, REFERENCES)
    with pytest.raises(ValueError, match="only with a model"):
        translation.evaluate(model_dir, SOURCES, REFERENCES, tokenizer=tokenizer)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        translation.evaluate(model_dir / "missing", SOURCES, REFERENCES)
    with pytest.raises(ValueError, match="beam_size"):
        translation.translate_lines(model, tokenizer, SOURCES, beam_size=0)
    with pytest.raises(TypeError, match="list of strings"):
        translation.translate_lines(model, tokenizer, "one sentence")
    # The fix names what was passed: bytes are decoded, anything else is not
    # text at all (a None said "Decode bytes to str first").
    with pytest.raises(TypeError, match=r"\[1\]` is a bytes.*Decode bytes to str"):
        translation.translate_lines(model, tokenizer, ["a", b"b"])
    with pytest.raises(TypeError, match=r"\[0\]` is a NoneType.*Pass one str per"):
        translation.translate_lines(model, tokenizer, [None])


def test_a_failed_score_log_leaves_no_empty_events_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk once the events file is begun: one line naming the
    folder, and neither that empty file nor a folder made for it stays
    (TensorBoard would list an empty run); another writer's file does."""
    from keras_transformer.files import FileWriteError
    from keras_transformer.translation import scores

    model, tokenizer = tiny_translator()
    result = translation.evaluate(
        model, SOURCES[:2], REFERENCES[:2], tokenizer=tokenizer, beam_size=1
    )
    begun = []

    def full_disk(writer, result, step):
        files = set(writer_folder.glob("events.out.tfevents.*"))
        begun.extend(files - {other, earlier})
        raise tf.errors.ResourceExhaustedError(None, None, "No space left on device")

    monkeypatch.setattr(scores, "_write_scores", full_disk)
    existing = tmp_path / "existing"
    existing.mkdir()
    other = existing / "events.out.tfevents.1.host.999999999.0.v2"
    other.write_bytes(b"another writer's scores")
    # An earlier log of this process (its PID in the name) stays too.
    earlier = existing / f"events.out.tfevents.2.host.{os.getpid()}.0.v2"
    earlier.write_bytes(b"this process's earlier scores")
    for writer_folder in (tmp_path / "new", existing):
        with pytest.raises(FileWriteError, match="no scores were logged there"):
            translation.log_scores(result, writer_folder)
    assert len(begun) == 2  # each call had begun its events file
    assert not (tmp_path / "new").exists()
    assert sorted(existing.iterdir()) == sorted([other, earlier])


def test_read_lines_keeps_alignment(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_bytes("\ufeffa\r\n\r\nb\nä ñ 中\n\nlast".encode())
    assert translation.read_lines(path) == ["a", "", "b", "ä ñ 中", "", "last"]
    path.write_bytes(b"a\n\n")
    assert translation.read_lines(path) == ["a", ""]
    path.write_bytes(b"")
    assert translation.read_lines(path) == []
    path.write_bytes(b"ok\nbad \xff\n")
    with pytest.raises(ValueError, match="line 2"):
        translation.read_lines(path)
    # UTF-16 gave "not valid UTF-8 (line 1, byte 0). Convert it, e.g. with
    # `iconv -f latin1`"; without a byte-order mark it translated NULs.
    path.write_bytes("a\nb\n".encode("utf-16"))
    with pytest.raises(ValueError, match=r"is UTF-16 text, not UTF-8 .*-f UTF-16"):
        translation.read_lines(path)
    path.write_bytes("a\nb\n".encode("utf-16-le"))
    with pytest.raises(ValueError, match="holds NUL bytes in its first line"):
        translation.read_lines(path)


def test_read_lines_reads_gzip_files_and_names_a_damaged_one(tmp_path: Path) -> None:
    """A ``.gz`` file (as the data sets come) was refused as "NUL bytes in
    its first line: it is UTF-16 text"; it is read, and a cut one is named."""
    import gzip

    text = "\ufeffa\r\n\nä ñ 中\n".encode()
    path = tmp_path / "in.txt.gz"
    path.write_bytes(gzip.compress(text))
    assert translation.read_lines(path) == ["a", "", "ä ñ 中"]
    # Told by the first bytes, not the name.
    (tmp_path / "in.txt").write_bytes(gzip.compress(text))
    assert translation.read_lines(tmp_path / "in.txt") == ["a", "", "ä ñ 中"]
    path.write_bytes(gzip.compress(text)[:-6])
    with pytest.raises(ValueError) as error:
        translation.read_lines(path)
    message = str(error.value)
    assert message.startswith(f"{path} is gzip-compressed but cannot be decompressed")
    assert "damaged or cut short" in message and "\n" not in message
    # The checks of the text hold inside the archive too.
    path.write_bytes(gzip.compress("a\nb\n".encode("utf-16")))
    with pytest.raises(ValueError, match="is UTF-16 text, not UTF-8"):
        translation.read_lines(path)


def test_translate_command_preserves_line_alignment(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd
) -> None:
    model, tokenizer = tiny_translator()
    lines = [SOURCES[0], "", "", SOURCES[1], "Grüße, señor, 中文", " ", SOURCES[2]]
    source = tmp_path / "source.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    output = tmp_path / "output.txt"
    args = _parse(
        translate_command.add_arguments,
        ["--workdir", str(model_dir), "--input", str(source), "--output", str(output)],
    )
    assert translate_command.run(args) == 0
    written = output.read_text(encoding="utf-8").split("\n")
    assert written[-1] == "" and len(written) - 1 == len(lines)
    assert written[:-1] == translation.translate_lines(model, tokenizer, lines)
    assert [bool(t) for t in written[:-1]] == [bool(s.strip()) for s in lines]
    captured = capfd.readouterr()
    assert captured.out == "" and "7/7" in captured.err  # progress on stderr

    # Standard input to standard output, greedy.
    stdin = io.TextIOWrapper(
        io.BytesIO("".join(f"{x}\n" for x in lines[:3]).encode()), "utf-8"
    )
    monkeypatch.setattr("sys.stdin", stdin)
    args = _parse(
        translate_command.add_arguments,
        ["--workdir", str(model_dir), "--beam-size", "1"],
    )
    assert translate_command.run(args) == 0
    expected = translation.translate_lines(model, tokenizer, lines[:3], beam_size=1)
    assert capfd.readouterr().out == "".join(f"{t}\n" for t in expected)


def test_evaluate_command_with_files_and_with_a_task(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, reference = tmp_path / "test.src", tmp_path / "test.ref"
    source.write_text("\n".join(SOURCES[:5]) + "\n", encoding="utf-8")
    reference.write_text("\n".join(REFERENCES[:5]) + "\n", encoding="utf-8")
    hypotheses = tmp_path / "hyp.txt"
    argv = ["--workdir", str(model_dir), "--source", str(source)]
    argv += ["--reference", str(reference), "--hypotheses", str(hypotheses)]
    argv += ["--log-dir", str(tmp_path / "logs"), "--json"]
    assert evaluate_command.run(_parse(evaluate_command.add_arguments, argv)) == 0
    printed = json.loads(capsys.readouterr().out)
    written = hypotheses.read_text(encoding="utf-8").splitlines()
    assert printed["bleu"] == pytest.approx(
        sacrebleu.corpus_bleu(written, [REFERENCES[:5]]).score
    )
    assert printed["split"] == "test.src" and printed["num_sentences"] == 5
    assert list((tmp_path / "logs").iterdir())

    # A data set split, without files; an export folder needs --task.
    argv = ["--workdir", str(model_dir), "--task", "dates", "--max-sentences", "3"]
    assert evaluate_command.run(_parse(evaluate_command.add_arguments, argv)) == 0
    assert "BLEU" in capsys.readouterr().out
    with pytest.raises(ValueError, match="--task"):
        evaluate_command.run(
            _parse(evaluate_command.add_arguments, ["--workdir", str(model_dir)])
        )
    with pytest.raises(ValueError, match="both --source and --reference"):
        evaluate_command.run(
            _parse(
                evaluate_command.add_arguments,
                ["--workdir", str(model_dir), "--source", str(source)],
            )
        )
    # --n-best was taken and ignored: the scores are the best translation's.
    from keras_transformer.cli._common import CommandError

    argv = ["--workdir", str(model_dir), "--task", "dates", "--n-best", "2"]
    with pytest.raises(CommandError, match="--n-best 2: evaluate scores the best"):
        evaluate_command.run(_parse(evaluate_command.add_arguments, argv))


def test_an_export_scores_its_runs_test_split_without_task(
    model_dir: Path,
    shared_translation_run: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``evaluate --workdir EXPORT`` said that the test set was unknown
    (pass --task): an export did not know its run's data. The run's data
    settings and seed go into its exports (``test_set.json``), and an export
    of the export keeps them; ``evaluate`` scores the run's test split."""
    import shutil

    from keras_transformer.export.formats import test_set_record
    from keras_transformer.export.target import TEST_SET_FILE

    folder = Path(shutil.copytree(model_dir, tmp_path / "export"))
    (folder / TEST_SET_FILE).write_text(test_set_record(shared_translation_run))
    run_config = json.loads((shared_translation_run / "config.json").read_text())
    record = json.loads((folder / TEST_SET_FILE).read_text())
    assert record == {"data": run_config["data"], "seed": run_config["train"]["seed"]}
    assert json.loads(test_set_record(folder)) == record  # an export of the export

    argv = ["--workdir", str(folder), "--beam-size", "1", "--json"]
    assert evaluate_command.run(_parse(evaluate_command.add_arguments, argv)) == 0
    printed = json.loads(capsys.readouterr().out)
    # The run's 16 test dates (data.num_eval_examples), not the task's default.
    assert printed["split"] == "test" and printed["num_sentences"] == 16
    assert run_config["data"]["num_eval_examples"] == 16

    (folder / TEST_SET_FILE).write_text("{")
    with pytest.raises(ValueError) as error:
        evaluate_command.run(_parse(evaluate_command.add_arguments, argv))
    message = str(error.value)
    assert str(folder / TEST_SET_FILE) in message and "\n" not in message
    assert "--task" in message
    (folder / TEST_SET_FILE).unlink()
    with pytest.raises(ValueError, match="neither a training run nor an export that"):
        evaluate_command.run(_parse(evaluate_command.add_arguments, argv))


@pytest.mark.slow
def test_commands_on_a_real_training_run(tmp_path: Path, capsys) -> None:
    """train -> evaluate (the run's test split) -> export -> compare (~25 s)."""
    from keras_transformer.training import train
    from tests.training.helpers import small_config

    workdir = tmp_path / "run"
    train(small_config(), workdir)
    capsys.readouterr()
    argv = ["--workdir", str(workdir), "--max-sentences", "4", "--beam-size", "2"]
    args = _parse(evaluate_command.add_arguments, argv)
    assert evaluate_command.run(args) == 0
    out = capsys.readouterr().out
    assert "BLEU" in out and "beam 2" in out
    hypotheses = workdir / "translations" / "test.beam2.last.txt"
    assert len(hypotheses.read_text(encoding="utf-8").splitlines()) == 4
    events = EventAccumulator(str(workdir / "logs" / "evaluate_test_beam2"))
    events.Reload()
    assert events.Tensors("bleu")[0].step == 6  # the last checkpoint's step

    exported = tmp_path / "exported" / "1"
    argv = ["--workdir", str(workdir), "--output", str(exported)]
    assert export_command.run(_parse(export_command.add_arguments, argv)) == 0
    capsys.readouterr()
    # The export scores the run's test split as the run does, without --task.
    argv = ["--workdir", str(workdir), "--max-sentences", "4", "--beam-size", "2"]
    scores = {}
    for folder in (workdir, exported):
        argv[1] = str(folder)
        args = _parse(evaluate_command.add_arguments, [*argv, "--json"])
        assert evaluate_command.run(args) == 0
        scores[folder] = json.loads(capsys.readouterr().out)
    assert scores[exported]["split"] == scores[workdir]["split"] == "test"
    assert scores[exported]["bleu"] == scores[workdir]["bleu"]
    loaded = tf.saved_model.load(str(exported))
    got = loaded.signatures["serving_default"](sentences=tf.constant(SOURCES[:3]))
    model, tokenizer = translation.load_translator(workdir)
    assert [t.decode() for t in got["translations"].numpy()] == (
        translation.translate_lines(model, tokenizer, SOURCES[:3])
    )


# ------------------------------------------------------------- cut sources
LONG = "Donnerstag, 5. Januar 2023 " * 10


def _fitting_limit() -> int:
    """The input limit that SOURCES[0] just fits (END included); LONG does not."""
    _, tokenizer = tiny_translator()
    limit = len(tokenizer.encode([SOURCES[0]])[0]) + 1
    assert len(tokenizer.encode([LONG])[0]) > 2 * limit
    return limit


def test_a_translator_says_which_sources_it_cut() -> None:
    model, tokenizer = tiny_translator()
    length = _fitting_limit()
    translator = translation.Translator(
        model, tokenizer, beam_size=1, max_input_length=length
    )
    with pytest.warns(translation.SourceCutWarning) as caught:
        outputs = translator.translate([SOURCES[0], LONG, "", LONG])
    assert len(caught) == 1  # one warning per call, naming every cut source
    message = str(caught[0].message)
    assert "2 of 4 sources" in message and f"max_input_length={length} " in message
    assert "(indices 1, 3;" in message
    assert translator.cut_lines == (1, 3)
    # The return type is unchanged: one string per line.
    assert isinstance(outputs, list) and len(outputs) == 4
    assert all(isinstance(text, str) for text in outputs)

    # A source of exactly max_input_length ids (END included) is not cut;
    # one id less is. `cut_lines` is that of the last call.
    with warnings.catch_warnings():
        warnings.simplefilter("error", translation.SourceCutWarning)
        assert translator.encode([SOURCES[0]])[0][-1] == tokenizer.END_ID
    assert translator.cut_lines == ()
    translator.max_input_length = length - 1
    with pytest.warns(translation.SourceCutWarning, match="1 of 1 sources"):
        (ids,) = translator.encode([SOURCES[0]])
    assert translator.cut_lines == (0,)
    assert ids == tokenizer.encode([SOURCES[0]])[0][: length - 2] + [tokenizer.END_ID]

    # Training's evaluation cuts at the run's training length by design:
    # `cut_lines` without a warning.
    from keras_transformer.training.evaluation import greedy_translator

    quiet = greedy_translator(model, tokenizer, max_length=length)
    with warnings.catch_warnings():
        warnings.simplefilter("error", translation.SourceCutWarning)
        quiet.encode([LONG, SOURCES[0]])
    assert quiet.cut_lines == (0,)


def test_a_model_with_learned_positions_cuts_sources_to_them(capsys) -> None:
    """A source longer than a model's learned source positions (but within
    max_input_length) stopped the translation with PositionEmbedding's
    multi-line error, naming the padded width; it is cut to the positions,
    with a warning that says so, as the SavedModel export caps it."""
    from keras_transformer.cli._common import report_cut_sources
    from keras_transformer.models import build_transformer
    from keras_transformer.models.presets import presets

    _, tokenizer = tiny_translator()
    positions = _fitting_limit()
    config = presets["tiny"].replace(
        vocabulary_size=tokenizer.vocabulary_size,
        num_encoder_layers=1,
        num_decoder_layers=1,
        position_encoding="learned",
        max_length=positions,
    )
    translator = translation.Translator(build_transformer(config), tokenizer)
    assert translator.max_input_length > positions
    assert translator.source_limit == positions
    with pytest.warns(translation.SourceCutWarning) as caught:
        outputs = translator.translate([SOURCES[0], LONG])
    assert len(outputs) == 2 and translator.cut_lines == (1,)
    message = str(caught[0].message)
    assert f"the model's {positions} learned source positions" in message
    assert "max_input_length" not in message
    (ids,) = translator.encode([LONG])
    assert ids == tokenizer.encode([LONG])[0][: positions - 1] + [tokenizer.END_ID]
    assert len(translator.score([LONG], [REFERENCES[0]])) == 1
    report_cut_sources("translate", translator)
    (line,) = _stderr_lines(capsys.readouterr().err)
    assert f"input limit of {positions} subword tokens" in line
    assert "learned source positions" in line and "--max-input-length" not in line
    # A smaller max_input_length still rules.
    translator.max_input_length = positions - 2
    assert translator.source_limit == positions - 2


def _stderr_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "keras-transformer" in line]


def test_translate_command_warns_once_about_cut_lines(
    model_dir: Path, tmp_path: Path, capfd
) -> None:
    source = tmp_path / "source.txt"
    source.write_text(f"{SOURCES[0]}\n{LONG}\n\n{LONG}\n{LONG}\n", encoding="utf-8")
    output = tmp_path / "output.txt"
    argv = ["--workdir", str(model_dir), "--input", str(source), "--output"]
    limit = str(_fitting_limit())
    argv += [str(output), "--max-input-length", limit, "--beam-size", "1"]
    assert translate_command.run(_parse(translate_command.add_arguments, argv)) == 0
    err = capfd.readouterr().err
    assert _stderr_lines(err) == [
        "keras-transformer translate: warning: 3 lines were longer than the input "
        f"limit of {limit} subword tokens (END included) and were cut to it (lines "
        "2, 4, 5); pass --max-input-length to change it."
    ]
    assert "SourceCutWarning" not in err  # the command's line, not Python's
    assert len(output.read_text(encoding="utf-8").splitlines()) == 5

    # Nothing cut: no warning.
    source.write_text(f"{SOURCES[0]}\n\n{SOURCES[1]}\n", encoding="utf-8")
    assert translate_command.run(_parse(translate_command.add_arguments, argv)) == 0
    assert _stderr_lines(capfd.readouterr().err) == []


def test_evaluate_refuses_an_empty_source_or_reference(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A blank line of a test set would be scored (an empty translation
    against its reference, or one against nothing), and BLEU would hide a
    misaligned file: refused in one line that names it, by `Translator.evaluate`
    too; on the command line before the model loads."""
    model, tokenizer = tiny_translator()
    references = [REFERENCES[0], " ", REFERENCES[2]]
    with pytest.raises(ValueError, match=r"^reference 2 \(counting from 1\) is empty"):
        translation.evaluate(model, SOURCES[:3], references, tokenizer=tokenizer)
    translator = translation.Translator(model, tokenizer)
    with pytest.raises(ValueError, match=r"^reference 2 \(counting from 1\) is empty"):
        translator.evaluate(SOURCES[:3], references)
    with pytest.raises(ValueError, match=r"^source 1 \(counting from 1\) is empty"):
        translator.evaluate(["", *SOURCES[1:3]], REFERENCES[:3])
    with pytest.raises(ValueError, match=r"^sources 1, 3 \(counting from 1\) are emp"):
        translation.evaluate(
            model, ["", SOURCES[1], "\t"], REFERENCES[:3], tokenizer=tokenizer
        )
    source, reference = tmp_path / "test.src", tmp_path / "test.ref"
    source.write_text("\n".join(SOURCES[:3]) + "\n", encoding="utf-8")
    reference.write_text(f"{REFERENCES[0]}\n\n{REFERENCES[2]}\n", encoding="utf-8")

    def no_model(args: argparse.Namespace) -> None:
        raise AssertionError("the model loaded before the test set was checked")

    monkeypatch.setattr(evaluate_command, "load_search_translator", no_model)
    argv = ["--workdir", str(model_dir), "--source", str(source), "--reference"]
    args = _parse(evaluate_command.add_arguments, [*argv, str(reference)])
    message = rf"^line 2 of {re.escape(str(reference))} \(counting from 1\) is empty"
    with pytest.raises(ValueError, match=message):
        evaluate_command.run(args)


def test_evaluate_command_warns_about_cut_sentences(
    model_dir: Path, tmp_path: Path, capfd
) -> None:
    source, reference = tmp_path / "test.src", tmp_path / "test.ref"
    source.write_text(f"{SOURCES[0]}\n{LONG}\n", encoding="utf-8")
    reference.write_text(f"{REFERENCES[0]}\n{REFERENCES[1]}\n", encoding="utf-8")
    argv = ["--workdir", str(model_dir), "--source", str(source), "--reference"]
    limit = _fitting_limit()
    argv += [str(reference), "--max-input-length", str(limit), "--beam-size", "1"]
    assert evaluate_command.run(_parse(evaluate_command.add_arguments, argv)) == 0
    captured = capfd.readouterr()
    assert _stderr_lines(captured.err) == [
        "keras-transformer evaluate: warning: 1 sentence was longer than the input "
        f"limit of {limit} subword tokens (END included) and was cut to it "
        "(sentence 2); pass --max-input-length to change it."
    ]
    assert "BLEU" in captured.out
