"""kt.ctranslate2: a CTranslate2 folder that translates exactly like `Translator`."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

if importlib.util.find_spec("ctranslate2") is None:
    pytest.skip(
        "the CTranslate2 export needs the ctranslate2 extra", allow_module_level=True
    )

import sacrebleu  # noqa: E402

from keras_transformer import cli  # noqa: E402
from keras_transformer.cpu import cpu_info  # noqa: E402
from keras_transformer.data import SubwordTokenizer, synthetic_dates  # noqa: E402
from keras_transformer.export.ctranslate2 import (  # noqa: E402
    INFO_FILE,
    INT8_IN_FLOAT32,
    INT8_IN_INT16,
    MODEL_BIN,
    TOKENIZER_FILE,
    CTranslate2Translator,
    export_ctranslate2,
    gnmt_length_penalty,
    import_ctranslate2,
    is_ctranslate2_dir,
)
from keras_transformer.models import build_transformer, presets  # noqa: E402
from keras_transformer.translation import Translator  # noqa: E402
from tests.export_helpers import (  # noqa: E402
    INPUTS,
    another_tokenizer,
    tiny_model,
    tiny_translator,
)

#: Imported after `prefer_mkl_for_int8`, as the package imports it.
ctranslate2 = import_ctranslate2()

#: Dates the tiny model has not seen, then long and non-ASCII inputs. Blank
#: lines are left out: CTranslate2 gives them an empty translation
#: (`test_blank_lines_give_empty_translations`).
SOURCES = [*synthetic_dates(20, seed=7).sources, *(s for s in INPUTS if s.strip())]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model, tokenizer = tiny_translator()
    return export_ctranslate2(
        model, tokenizer, tmp_path_factory.mktemp("ct2") / "float32"
    )


def test_folder_holds_model_tokenizer_and_settings(folder: Path) -> None:
    from keras_transformer.export.formats import test_set_record
    from keras_transformer.runs import is_run_dir, run_kind

    _, tokenizer = tiny_translator()
    assert is_ctranslate2_dir(folder)
    # Its own config.json (CTranslate2's) does not make it a training run:
    # no run's data settings are read from it.
    assert (folder / "config.json").is_file() and not is_run_dir(folder)
    assert run_kind(folder) == "translation" and test_set_record(folder) is None
    assert (folder / TOKENIZER_FILE).read_bytes() == tokenizer.model_proto
    info = json.loads((folder / INFO_FILE).read_text())
    assert (info["beam_size"], info["alpha"], info["extra_length"]) == (4, 0.6, 50)
    assert info["max_output_length"] == info["max_input_length"] + 50
    assert info["quantization"] == "float32"


def test_a_damaged_settings_file_is_one_line_naming_it(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A truncated or hand-cut settings file is refused in one line naming it
    and the export command (was a bare JSONDecodeError or a KeyError)."""
    import shutil

    copy = Path(shutil.copytree(folder, tmp_path / "ct2"))
    info = copy / INFO_FILE
    info.write_text('{"beam_size": 4,')
    with pytest.raises(ValueError, match="is not valid JSON.*--format ctranslate2"):
        CTranslate2Translator(copy)
    info.write_text('{"beam_size": 4}')
    missing = "alpha, extra_length, max_input_length, max_output_length"
    with pytest.raises(ValueError, match=f"lacks {missing}"):
        CTranslate2Translator(copy)
    assert f"{info} lacks {missing}" in _translate_error(copy, tmp_path, capsys)


def test_an_engine_that_cannot_load_the_export_gives_its_reason(folder: Path) -> None:
    """A device CTranslate2 lacks is the engine's reason, not "damaged"."""
    if ctranslate2.get_cuda_device_count():
        pytest.skip("this machine has a CUDA device: the export loads there")
    with pytest.raises(ValueError) as error:
        CTranslate2Translator(folder, device="cuda")
    message = str(error.value)
    assert "could not be loaded (CUDA" in message and "damaged" not in message
    assert "if a file was cut short or replaced, restore" in message


def _translate_error(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> str:
    """The one line `keras-transformer translate --workdir folder` fails with."""
    source = tmp_path / "in.txt"
    source.write_text("Montag, 3. Juli 2023\n")
    argv = ["translate", "--workdir", str(folder), "--input", str(source)]
    assert cli.main(argv) != 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize(
    "damage",
    [
        "model.bin cut",
        "sentencepiece.model cut",
        "sentencepiece.model deleted",
        "shared_vocabulary.json cut",
        "model.bin deleted",
        "keras_transformer.json deleted",
        "sentencepiece.model of another",
        "model.bin of another",
        "shared_vocabulary.json of another",
    ],
)
def test_damaged_export_files_are_one_line_naming_them(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    """CTranslate2 and SentencePiece raised a bare RuntimeError (a traceback
    from `translate`) for a cut or deleted file of the export, naming a
    tensor or nothing; an export without ``model.bin`` was a run that "holds
    no trained model yet ... Train it"."""
    import shutil

    copy = Path(shutil.copytree(folder, tmp_path / "ct2"))
    name, how = damage.split(" ", 1)
    if how == "cut":
        (copy / name).write_bytes((copy / name).read_bytes()[:40])
    elif how == "deleted":
        (copy / name).unlink()
    elif name == TOKENIZER_FILE:  # same size, other pieces: every translation
        (copy / name).write_bytes(another_tokenizer().model_proto)  # was wrong
    else:  # of another export of the same size: served without a word
        tokenizer = another_tokenizer() if name.startswith("shared") else None
        model, own = tiny_translator()
        other = export_ctranslate2(
            tiny_model(own) if tokenizer is None else model,
            tokenizer or own,
            tmp_path / "other",
        )
        (copy / name).write_bytes((other / name).read_bytes())
    expected = {
        "model.bin cut": f"{copy}'s model.bin, config.json or shared_vocabulary.json "
        "could not be loaded",
        "sentencepiece.model cut": f"{copy / TOKENIZER_FILE} is damaged",
        "sentencepiece.model deleted": f"{copy / TOKENIZER_FILE} is missing",
        "shared_vocabulary.json cut": f"{copy}'s model.bin, config.json or shared_"
        "vocabulary.json could not be loaded",
        "model.bin deleted": "a CTranslate2 export's keras_transformer.json but no "
        "model.bin, so the export is incomplete",
        "keras_transformer.json deleted": "a CTranslate2 export's model.bin but no "
        "keras_transformer.json, so the export is incomplete",
        "sentencepiece.model of another": f"The tokenizer of {copy} is not the one "
        "the export was written with",
        "model.bin of another": f"{copy / MODEL_BIN} is not the file the export "
        "was written with",
        "shared_vocabulary.json of another": f"{copy / 'shared_vocabulary.json'} is "
        "not the file the export was written with",
    }[damage]
    err = _translate_error(copy, tmp_path, capsys)
    assert expected in err and "restore" in err.lower(), err


@pytest.mark.parametrize("beam_size", [1, 4], ids=["greedy", "beam4"])
def test_translations_identical_to_translator(folder: Path, beam_size: int) -> None:
    """Greedy outputs, and beam-4 outputs re-ranked by the GNMT penalty."""
    model, tokenizer = tiny_translator()
    ours = Translator(model, tokenizer, beam_size=beam_size).translate(SOURCES)
    served = CTranslate2Translator(folder).translate(SOURCES, beam_size=beam_size)
    assert served == ours
    assert len(set(served)) > 10  # not degenerate


@pytest.mark.parametrize("beam_size", [1, 4], ids=["greedy", "beam4"])
def test_ids_and_scores_close_to_translator(folder: Path, beam_size: int) -> None:
    """Same ids; scores within 1e-2. CTranslate2 renormalises the softmax
    without the suppressed padding id, the project masks it after the
    log-softmax: its log P is higher by the (small) padding mass."""
    model, tokenizer = tiny_translator()
    sources = list(SOURCES[:16])
    ours = Translator(model, tokenizer, beam_size=beam_size)
    expected = ours.decode_ids(np.asarray(_pad(ours.encode(sources))))
    served = CTranslate2Translator(folder).translate_hypotheses(
        sources, beam_size=beam_size
    )
    for row, hypothesis in enumerate(served):
        length = int(expected.lengths[row])
        assert list(hypothesis.token_ids) == list(expected.token_ids[row, :length])
        assert hypothesis.score == pytest.approx(expected.scores[row], abs=1e-2)
        assert hypothesis.score >= expected.scores[row] - 1e-5
        penalty = gnmt_length_penalty(length, 0.6) if beam_size > 1 else 1.0
        assert hypothesis.score == pytest.approx(hypothesis.log_prob / penalty)


def _pad(rows: list[list[int]]) -> np.ndarray:
    padded = np.zeros((len(rows), max(map(len, rows))), "int32")
    for i, row in enumerate(rows):
        padded[i, : len(row)] = row
    return padded


def test_output_cap_of_each_source(tmp_path: Path) -> None:
    """Outputs cut at their source's length + extra_length (§6.1) as the
    project cuts them, each at its own cap within a batch: an untrained
    model, whose outputs rarely end."""
    _, tokenizer = tiny_translator()
    model = _tiny_model(tokenizer, dropout=0.0)
    folder = export_ctranslate2(model, tokenizer, tmp_path / "ct2", extra_length=3)
    sources = ["5. Januar", *SOURCES[:6]]
    served = CTranslate2Translator(folder)
    for beam_size in (1, 4):
        ours = Translator(model, tokenizer, beam_size=beam_size, extra_length=3)
        expected = ours.decode_ids(_pad([*ours.encode(sources)]))
        hypotheses = served.translate_hypotheses(sources, beam_size=beam_size)
        for row, hypothesis in enumerate(hypotheses):
            length = int(expected.lengths[row])
            assert list(hypothesis.token_ids) == list(expected.token_ids[row, :length])
    limits = [len(ids) + 3 for ids in ours.encode(sources)]
    end = tokenizer.END_ID
    pairs = zip(hypotheses, limits, strict=True)
    cut = [
        h for h, limit in pairs if len(h.token_ids) == limit and end not in h.token_ids
    ]
    assert len(cut) >= 2  # outputs did reach their (different) caps


def test_sources_cut_to_the_exports_limit_are_named(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A source longer than the export's ``max_input_length`` was cut
    without a word from a CTranslate2 export, where a run or a SavedModel
    export names it: the translator records it in `cut_lines` and warns
    (`SourceCutWarning`); ``translate`` and ``evaluate`` say which line was
    cut and what keeps more of it."""
    from keras_transformer.source_limits import SourceCutWarning

    translator = CTranslate2Translator(folder)
    long = " ".join(["1. Mai 2020"] * 40)  # far over 128 subword tokens
    with pytest.warns(SourceCutWarning, match="CTranslate2Translator.cut_lines"):
        translator.translate([SOURCES[0], long])
    assert translator.cut_lines == (1,)
    translator.translate([SOURCES[0]])
    assert translator.cut_lines == ()

    source = tmp_path / "source.txt"
    source.write_text(f"{SOURCES[0]}\n{long}\n", encoding="utf-8")
    argv = ["--workdir", str(folder), "--no-progress"]
    output = tmp_path / "out.txt"
    assert (
        cli.main(["translate", *argv, "--input", str(source), "--output", str(output)])
        == 0
    )
    err = capsys.readouterr().err
    assert "1 line was longer than the input limit of 128 subword tokens" in err, err
    assert "(line 2)" in err and "export the run again with a larger" in err, err
    assert len(output.read_text(encoding="utf-8").splitlines()) == 2
    evaluate = ["evaluate", *argv, "--source", str(source), "--reference", str(source)]
    assert cli.main(evaluate) == 0
    err = capsys.readouterr().err
    assert "1 sentence was longer than the input limit" in err and "(sentence 2)" in err


def test_a_source_cut_to_the_models_learned_positions_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The export of a model with 16 learned source positions (its limit by
    default) advised "export the run again with a larger
    --max-input-length" for a cut source, which that export refuses."""
    from keras_transformer.source_limits import SourceCutWarning

    _, tokenizer = tiny_translator()
    model = _tiny_model(tokenizer, position_encoding="learned", max_length=16)
    folder = export_ctranslate2(model, tokenizer, tmp_path / "ct2", beam_size=1)
    info = json.loads((folder / INFO_FILE).read_text())
    assert info["max_input_length"] == info["learned_source_positions"] == 16
    translator = CTranslate2Translator(folder)
    long = " ".join(["1. Mai 2020"] * 10)
    with pytest.warns(SourceCutWarning, match="number of learned source positions"):
        translator.translate([long])
    source = tmp_path / "source.txt"
    source.write_text(f"{long}\n", encoding="utf-8")
    argv = ["translate", "--workdir", str(folder), "--input", str(source)]
    assert cli.main([*argv, "--output", str(tmp_path / "out.txt")]) == 0
    err = capsys.readouterr().err
    assert "input limit of 16 subword tokens" in err, err
    assert err.rstrip().endswith(
        "it is the model's number of learned source positions."
    )


def test_own_ranking_without_reranking(folder: Path) -> None:
    """``rerank=False``: CTranslate2's best by ``log P / |Y| ** alpha``."""
    translator = CTranslate2Translator(folder)
    sources = list(SOURCES[:8])
    own = translator.translate_hypotheses(sources, rerank=False)
    direct = translator.engine.translate_batch(
        translator.encode(sources), beam_size=4, length_penalty=0.6,
        max_decoding_length=200, min_decoding_length=0, return_scores=True,
    )  # fmt: skip
    assert [h.text for h in own] == [
        translator.processor.decode(r.hypotheses[0]) for r in direct
    ]
    assert all(np.isnan(h.log_prob) for h in own)


def test_blank_lines_give_empty_translations(folder: Path) -> None:
    """The one difference from `Translator`, which decodes END alone."""
    served = CTranslate2Translator(folder).translate_hypotheses(["", "  ", "1. Mai"])
    assert [h.text for h in served[:2]] == ["", ""]
    assert served[2].text and served[2].token_ids[-1] == 3


def test_one_string_is_refused_not_translated_character_by_character(
    folder: Path,
) -> None:
    """Reported (issue 35): a bare string was read as a list of sentences,
    one per character. A sentence that is not a str is named, as by
    `Translator` (was SentencePiece's "List elements must be str or bytes")."""
    translator = CTranslate2Translator(folder)
    for entry in (translator.translate, translator.translate_hypotheses):
        with pytest.raises(TypeError, match="list of strings; wrap one string in"):
            entry("1. Mai 2020")
        with pytest.raises(TypeError, match=r"`sentences\[1\]` is a int, not a str"):
            entry(["1. Mai 2020", 5])
        with pytest.raises(TypeError, match="Decode bytes to str first"):
            entry([b"1. Mai 2020"])


@pytest.mark.parametrize(
    "command, flags",
    [
        ("score", ["--source", "{s}", "--target", "{s}"]),
        ("export", ["--output", "{out}"]),
        ("classify", ["--input", "{s}", "--output", "{out}"]),
    ],
)
def test_commands_that_need_the_keras_model_name_a_ctranslate2_export(
    folder: Path,
    tmp_path: Path,
    command: str,
    flags: list[str],
    capsys: pytest.CaptureFixture,
) -> None:
    """Reported (issue 35): ``score``/``export --workdir`` of a CTranslate2
    export said ``tokenizer/tokenizer.model not found``. One line (exit 2)
    saying what the folder is and what the command needs (``evaluate``
    scores the export: `test_evaluate_scores_a_ctranslate2_export_as_it_translates`)."""
    source = tmp_path / "source.txt"
    source.write_text("1. Mai 2020\n")
    given = [f.format(s=source, out=tmp_path / "out") for f in flags]
    assert cli.main([command, "--workdir", str(folder), *given]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"--workdir {folder} is a CTranslate2 export" in err
    assert "a training run folder" in err and "SavedModel export folder" in err
    assert not (tmp_path / "out").exists()


def test_evaluate_scores_a_ctranslate2_export_as_it_translates(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """``evaluate --workdir <CTranslate2 export>`` was refused (only
    ``translate`` served the folder): the int8 export of a model could not
    be scored against its float32 one on a test set. It scores the
    translations of the export's own search (`CTranslate2Translator`, as
    ``translate`` gives them), names the engine and its weights, keeps the
    hypotheses, and takes the search flags the export serves."""
    pairs = synthetic_dates(24, seed=3)
    source, reference = tmp_path / "source.txt", tmp_path / "reference.txt"
    source.write_text("\n".join(pairs.sources) + "\n", encoding="utf-8")
    reference.write_text("\n".join(pairs.targets) + "\n", encoding="utf-8")
    argv = ["evaluate", "--workdir", str(folder), "--source", str(source)]
    argv += ["--reference", str(reference), "--json"]
    for method, beam in (("beam", 4), ("greedy", 1)):
        hypotheses = tmp_path / f"{method}.txt"
        given = [*argv, "--method", method, "--hypotheses", str(hypotheses)]
        assert cli.main(given) == 0
        printed = json.loads(capsys.readouterr().out)
        expected = CTranslate2Translator(folder, beam_size=beam).translate(
            list(pairs.sources)
        )
        assert hypotheses.read_text(encoding="utf-8").splitlines() == expected
        bleu = sacrebleu.corpus_bleu(expected, [list(pairs.targets)]).score
        assert printed["bleu"] == pytest.approx(bleu)
        assert printed["bleu"] > 10  # the tiny model translates dates
        assert printed["beam_size"] == beam and printed["num_sentences"] == 24
        # CTranslate2 stops a sentence by its own rule, not exact or heuristic.
        assert printed["engine"] == "CTranslate2 export, float32 weights"
        assert printed["early_stop"] is None
    assert cli.main(argv[:-1] + ["--max-sentences", "2"]) == 0
    assert "beam 4, alpha 0.6 (CTranslate2 export, float32 weights)" in (
        capsys.readouterr().out
    )
    # A search the export does not serve is one line, before anything is read.
    assert cli.main([*argv, "--method", "sample"]) == 1
    err = capsys.readouterr().err
    assert "CTranslate2 export" in err and "--method sample" in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    # --weights picks a run's weights: refused for the export (the export's
    # own config.json made it pass for a run, and translate ignored it).
    translate = ["translate", "--workdir", str(folder), "--input", str(source)]
    for command in (argv, translate):
        assert cli.main([*command, "--weights", "best"]) == 2
        err = capsys.readouterr().err
        assert "is an export, which holds the weights it was exported with" in err


@pytest.mark.parametrize(
    "command, holds_no",
    [("average-checkpoints", "checkpoints to average"), ("complete", "test images")],
)
def test_commands_that_need_a_run_name_a_ctranslate2_export(
    folder: Path,
    tmp_path: Path,
    command: str,
    holds_no: str,
    capsys: pytest.CaptureFixture,
) -> None:
    """``average-checkpoints --workdir <CTranslate2 export>`` said
    ``tokenizer/tokenizer.model not found``, and ``complete`` took the
    export's own config.json for a translation run's; one line names the
    export."""
    output = tmp_path / "output"
    argv = [command, "--workdir", str(folder), "--output", str(output)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"--workdir {folder} is a CTranslate2 export" in err
    assert f"holds no {holds_no}" in err and "train --workdir" in err
    assert not output.exists()


def test_a_ctranslate2_export_in_an_ensemble_names_the_export(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """``translate --ensemble <CTranslate2 export>`` said
    ``tokenizer/tokenizer.model not found``; one line names the export."""
    source = tmp_path / "source.txt"
    source.write_text("1. Mai 2020\n")
    argv = ["translate", "--workdir", str(folder), "--ensemble", str(folder)]
    assert cli.main([*argv, "--input", str(source)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"--ensemble {folder} is a CTranslate2 export" in err
    assert "a training run folder" in err and "SavedModel export folder" in err


def test_int8_within_half_a_bleu_point(folder: Path, tmp_path: Path) -> None:
    model, tokenizer = tiny_translator()
    pairs = synthetic_dates(96, seed=5)
    references = [list(pairs.targets)]
    int8 = export_ctranslate2(model, tokenizer, tmp_path / "int8", quantization="int8")
    bleu = {
        name: sacrebleu.corpus_bleu(
            CTranslate2Translator(path).translate(pairs.sources), references
        ).score
        for name, path in (("float32", folder), ("int8", int8))
    }
    assert bleu["float32"] > 20  # a model that translates
    assert abs(bleu["int8"] - bleu["float32"]) <= 0.5
    assert (int8 / "model.bin").stat().st_size < (folder / "model.bin").stat().st_size


#: The libraries held to AVX2, as on an x86 CPU without VNNI (an AMD EPYC of
#: the Zen 2/3 generations, an Intel CPU before Cascade Lake).
AVX2_ONLY = {
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "CT2_FORCE_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
}
#: Translates the dates with each folder in a fresh process (CTranslate2
#: chooses its GEMM backends on import); prints BLEU, compute type, warnings.
_SERVE_SCRIPT = """
import json, sys, warnings
import sacrebleu
from keras_transformer.data import synthetic_dates
from keras_transformer.export.ctranslate2 import CTranslate2Translator, _summary
pairs = synthetic_dates(96, seed=5)
served = {}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for name, folder, compute_type in json.loads(sys.argv[1]):
        translator = CTranslate2Translator(folder, compute_type=compute_type)
        outputs = translator.translate(pairs.sources)
        bleu = sacrebleu.corpus_bleu(outputs, [list(pairs.targets)]).score
        served[name] = [bleu, translator.compute_type]
summary = _summary(folder, "translation", "int8")
print(json.dumps([served, [str(w.message) for w in caught], summary]))
"""


def _serve_in_process(calls: list, environ: dict[str, str]) -> tuple:
    env = {k: v for k, v in os.environ.items() if k != "CT2_USE_MKL"}
    done = subprocess.run(
        [sys.executable, "-c", _SERVE_SCRIPT, json.dumps(calls)],
        env={**env, **environ},
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return tuple(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.fixture(scope="module")
def int8_folder(folder: Path) -> Path:
    model, tokenizer = tiny_translator()
    return export_ctranslate2(
        model, tokenizer, folder.parent / "int8", quantization="int8"
    )


needs_avx2 = pytest.mark.skipif(
    "AVX2" not in cpu_info().instruction_sets,
    reason="reproduces an x86 CPU with AVX2 and without VNNI",
)


@needs_avx2
def test_int8_within_half_a_bleu_point_on_a_cpu_without_vnni(
    folder: Path, int8_folder: Path
) -> None:
    """With oneDNN and MKL held to AVX2, the package points CTranslate2 at
    MKL and computes the int8 weights in int16, which keeps float32's
    quality, and the export says so.

    Reported: on an Intel Xeon (AMX) held to AVX2, MKL's int8 GEMM scored
    19.7 BLEU against float32's 24.5 (this test computed in int8 then). On
    an AMD EPYC held to AVX2 the same GEMM had kept its sums (27.2 against
    27.7), so whether MKL's int8 saturates depends on the CPU's maker; its
    int16 GEMM adds in 32 bits on both."""
    served, caught, summary = _serve_in_process(
        [
            ["float32", str(folder), "default"],
            ["int8", str(int8_folder), "default"],
        ],
        AVX2_ONLY,
    )
    assert served["float32"][0] > 20
    assert served["int8"][1] == "int16"  # exact integer compute, no fallback
    assert abs(served["int8"][0] - served["float32"][0]) <= 0.5
    assert caught == [] and INT8_IN_INT16 in summary and INT8_IN_FLOAT32 not in summary


@needs_avx2
def test_saturating_int8_computes_in_float32_and_says_so(
    folder: Path, int8_folder: Path
) -> None:
    """Where CTranslate2 was told to use oneDNN on such a CPU (no int16
    GEMM), int8 compute loses quality (the saturation, reproduced); the
    translator computes the int8 weights in float32 instead, warns once,
    and the export says so."""
    served, caught, summary = _serve_in_process(
        [
            ["float32", str(folder), "default"],
            ["int8 forced", str(int8_folder), "int8"],
            ["int8", str(int8_folder), "default"],
        ],
        {**AVX2_ONLY, "CT2_USE_MKL": "0"},
    )
    assert served["int8 forced"][0] < served["float32"][0] - 2
    assert served["int8"][1] == "float32"
    assert abs(served["int8"][0] - served["float32"][0]) <= 0.5
    assert len(caught) == 1 and INT8_IN_FLOAT32 in caught[0]
    assert "\n" not in caught[0] and INT8_IN_FLOAT32 in summary


def test_pre_ln_learned_positions_untied_gelu_convert_exactly(tmp_path: Path) -> None:
    """The variants CTranslate2 can express: an untrained model of each,
    compared on ids (outputs run to their cap: the positions matter)."""
    _, tokenizer = tiny_translator()
    config = presets["tiny"].replace(
        vocabulary_size=tokenizer.vocabulary_size,
        num_encoder_layers=2,
        num_decoder_layers=1,
        d_model=32,
        d_ff=48,
        num_heads=4,
        dropout=0.0,
        position_encoding="learned",
        max_length=64,
        norm_first=True,
        share_embeddings=False,
        activation="gelu",
        layer_norm_epsilon=1e-5,
    )
    model = build_transformer(config)
    folder = export_ctranslate2(
        model, tokenizer, tmp_path / "ct2", beam_size=1, max_input_length=12
    )
    assert json.loads((folder / INFO_FILE).read_text())["max_output_length"] == 62
    sources = list(SOURCES[:6])
    ours = Translator(model, tokenizer, beam_size=1, max_input_length=12)
    expected = ours.decode_ids(_pad(ours.encode(sources)))
    served = CTranslate2Translator(folder).translate_hypotheses(sources)
    for row, hypothesis in enumerate(served):
        length = int(expected.lengths[row])
        assert list(hypothesis.token_ids) == list(expected.token_ids[row, :length])


def _tiny_model(tokenizer: SubwordTokenizer, **changes: object):
    config = presets["tiny"].replace(
        vocabulary_size=tokenizer.vocabulary_size,
        num_encoder_layers=1,
        num_decoder_layers=1,
        d_model=32,
        d_ff=64,
        num_heads=2,
        **changes,
    )
    return build_transformer(config)


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        (
            {"attention_settings": {"window": 3}},
            "model.attention_settings.window=3",
        ),
        (
            {"attention_settings": {"relative_positions": 4}},
            "model.attention_settings.relative_positions=4",
        ),
        ({"value_dim": 8}, "model.value_dim=8"),
        ({"activation": "elu"}, "model.activation='elu'"),
    ],
    ids=["restricted", "relative", "value_dim", "activation"],
)
def test_refuses_what_ctranslate2_cannot_express(
    tmp_path: Path, changes: dict, named: str
) -> None:
    _, tokenizer = tiny_translator()
    model = _tiny_model(tokenizer, **changes)
    with pytest.raises(ValueError, match="CTranslate2 cannot express") as error:
        export_ctranslate2(model, tokenizer, tmp_path / "ct2")
    assert named in str(error.value) and "\n" not in str(error.value)
    assert not (tmp_path / "ct2").exists()


@pytest.mark.parametrize("kv_heads", [2, 1])
def test_grouped_query_attention_translates_identically(
    tmp_path: Path, kv_heads: int
) -> None:
    """Grouped-query (Ainslie et al., 2023; 2 key/value heads of 4) and
    multi-query attention go to CTranslate2's `num_heads_kv`: the same
    greedy ids as `Translator`."""
    import keras

    _, tokenizer = tiny_translator()
    keras.utils.set_random_seed(kv_heads)
    config = presets["tiny"].replace(
        vocabulary_size=tokenizer.vocabulary_size,
        num_encoder_layers=1,
        num_decoder_layers=1,
        d_model=32,
        d_ff=64,
        num_heads=4,
        attention_settings={"num_key_value_heads": kv_heads},
    )
    model = build_transformer(config)
    folder = export_ctranslate2(model, tokenizer, tmp_path / "ct2")
    sources = list(SOURCES[:8])
    ours = Translator(model, tokenizer, beam_size=1, extra_length=5)
    expected = ours.decode_ids(np.asarray(_pad(ours.encode(sources))))
    served = CTranslate2Translator(folder).translate_hypotheses(sources, beam_size=1)
    for row, hypothesis in enumerate(served):
        length = int(expected.lengths[row])
        assert list(hypothesis.token_ids)[:length] == list(
            expected.token_ids[row, :length]
        )


def test_refuses_concatenated_positions(tmp_path: Path) -> None:
    from keras_transformer.models import TransformerStack

    _, tokenizer = tiny_translator()
    model = _tiny_model(tokenizer)
    TransformerStack.of(model).source_position.merge_mode = "concat"
    with pytest.raises(ValueError, match="merge_mode='concat'"):
        export_ctranslate2(model, tokenizer, tmp_path / "ct2")


def test_refuses_bad_quantization_sampling_and_occupied_folder(
    folder: Path, tmp_path: Path
) -> None:
    model, tokenizer = tiny_translator()
    with pytest.raises(ValueError, match="quantization='int4' is not"):
        export_ctranslate2(model, tokenizer, tmp_path / "a", quantization="int4")
    with pytest.raises(ValueError, match="method='sample'"):
        export_ctranslate2(model, tokenizer, tmp_path / "b", method="sample")
    with pytest.raises(ValueError, match="not early_stop='heuristic'"):
        export_ctranslate2(model, tokenizer, tmp_path / "b", early_stop="heuristic")
    assert not (tmp_path / "b").exists()
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not empty"):
        export_ctranslate2(model, tokenizer, tmp_path / "c")
    with pytest.raises(FileExistsError, match="holds no CTranslate2 export"):
        export_ctranslate2(model, tokenizer, tmp_path / "c", overwrite=True)
    assert (tmp_path / "c" / "notes.txt").read_text() == "mine"
    with pytest.raises(ValueError, match="not a CTranslate2 export"):
        CTranslate2Translator(tmp_path / "c")


@pytest.mark.slow
def test_command_line_export_and_translate(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """``export --format ctranslate2`` of a run, then ``translate --workdir``
    of the folder: the run's greedy translations."""
    from keras_transformer.training import train
    from tests.training.helpers import small_config

    run = tmp_path / "run"
    config = small_config(
        "train.train_steps=2",
        "train.steps_per_epoch=2",
        "train.validation_every=1000",
        "train.test_samples=2",
        "train.keep_best=false",
        "model.optimizer.warmup_steps=1",
    )
    train(config, run, printer=None)
    output = tmp_path / "ct2"
    flags = ["--workdir", str(run), "--format", "ctranslate2", "--output", str(output)]
    assert cli.main(["export", *flags, "--quantization", "int16"]) == 0
    assert "translate --workdir" in capsys.readouterr().out
    assert json.loads((output / INFO_FILE).read_text())["quantization"] == "int16"
    assert cli.main(["export", *flags, "--overwrite"]) == 0
    source = tmp_path / "in.txt"
    source.write_text("\n".join(synthetic_dates(3, seed=2).sources) + "\n")
    served = tmp_path / "served.txt"
    assert cli.main(["translate", "--workdir", str(output), "--input", str(source),
                     "--output", str(served), "--method", "greedy"]) == 0  # fmt: skip
    lines = served.read_text().splitlines()
    assert len(lines) == 3
    translator = Translator.load(run, "last", beam_size=1)
    assert lines == translator.translate(source.read_text().splitlines())
    refused = ["export", "--workdir", str(run), "--output", str(tmp_path / "sm")]
    # The SavedModel takes float32 and int8 (test_export.py); not CTranslate2's int16.
    assert cli.main([*refused, "--quantization", "int16"]) != 0
    error = capsys.readouterr().err
    assert "(--format savedmodel takes float32, int8)" in error
    # It named every format with quantizations: "applies to --format
    # savedmodel or litert or ctranslate2".
    assert "--quantization int16 applies to --format ctranslate2 (" in error
    assert cli.main([*refused, "--quantization", "int4"]) != 0
    assert "--quantization int4 is written by no format (" in capsys.readouterr().err
