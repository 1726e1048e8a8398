"""Translating text and scoring a test set: beam search, sacreBLEU, chrF (§6.1).

"We used beam search with a beam size of 4 and length penalty alpha = 0.6
... We set the maximum output length during inference to input length + 50,
but terminate early when possible" (Vaswani et al. 2017, §6.1). These are the
defaults here; ``beam_size=1`` decodes greedily (what training reports).

* `translate_lines(model, tokenizer, lines)`: one output per input line, in
  order; a line without any subword token (``""``, whitespace) gives ``""``.
* `evaluate(model_or_workdir, sources, references)` (also ``kt.evaluate``):
  translates a test set, writes the hypotheses (one per line, UTF-8), and
  scores them with sacreBLEU and chrF, reporting sacrebleu's signatures and
  logging the scores to TensorBoard.
* The ``evaluate`` and ``translate`` subcommands of ``keras-transformer``
  (`add_evaluate_arguments`/`run_evaluate`,
  `add_translate_arguments`/`run_translate`).

Sources are cut to their first ``max_input_length - 1`` subword tokens, then
END (the rule of `keras_transformer.data.batch_for_eval` and of the exported
SavedModel, `keras_transformer.export`). Scores are computed on detokenized
text against the raw references with sacrebleu's defaults (13a tokenization,
mixed case; Post, 2018), not the tokenized BLEU of the paper's tables.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.data import (
    DEFAULT_BUCKET_BOUNDARIES,
    SubwordTokenizer,
    TextPairs,
    batch_for_eval,
)
from keras_transformer.decoding import (
    EXTRA_LENGTH,
    beam_search,
    check_integer,
    check_length_penalty,
    greedy_decode,
)
from keras_transformer.training.evaluation import EvaluationResult, Translation

__all__ = [
    "DEFAULT_MAX_INPUT_LENGTH",
    "TestSetEvaluation",
    "add_evaluate_arguments",
    "add_translate_arguments",
    "evaluate",
    "load_translator",
    "read_lines",
    "run_evaluate",
    "run_translate",
    "score_translations",
    "translate_lines",
    "write_lines",
]

#: Longest source in subword ids, END included (as `export`'s default).
DEFAULT_MAX_INPUT_LENGTH = 128
#: Default test split of each task of `keras-transformer train`.
_DEFAULT_SPLITS = {
    "multi30k": "test_2016_flickr",
    "tatoeba": "test",
    "dates": "test",
    "files": "test",
}


@dataclasses.dataclass(frozen=True)
class TestSetEvaluation(EvaluationResult):
    """Scores of a translated test set (an `EvaluationResult` plus the decoding).

    Attributes:
        beam_size: the beam size used (1: greedy).
        length_penalty: `alpha` of the length penalty.
        hypotheses_path: where the hypotheses were written, if anywhere.
        log_dir: the TensorBoard folder the scores were logged to, if any.
    """

    __test__ = False  # not a pytest test class, despite its name

    beam_size: int = 4
    length_penalty: float = 0.6
    hypotheses_path: str | None = None
    log_dir: str | None = None

    @property
    def hypotheses(self) -> list[str]:
        """The translations, in the order of the sources."""
        return [t.hypothesis for t in self.translations]

    @property
    def decoding(self) -> str:
        """``"greedy"`` or ``"beam 4, alpha 0.6"``."""
        if self.beam_size == 1:
            return "greedy"
        return f"beam {self.beam_size}, alpha {self.length_penalty:g}"

    def summary(self) -> str:
        """One line: the scores, their signatures and the decoding."""
        return f"{super().summary()}; {self.decoding}"


# ------------------------------------------------------------ translating
def _check_lines(name: str, lines: Any) -> list[str]:
    if isinstance(lines, (str, bytes)):
        raise TypeError(
            f"`{name}` must be a list of strings; wrap one string in a list."
        )
    lines = list(lines)
    for i, line in enumerate(lines):
        if not isinstance(line, str):
            raise TypeError(
                f"`{name}[{i}]` is a {type(line).__name__}, not a str. Decode "
                "bytes to str first."
            )
    return lines


def _check_decoding(
    beam_size: int,
    length_penalty: float,
    max_input_length: int,
    extra_length: int,
    batch_size: int,
) -> None:
    for name, value, minimum in (
        ("beam_size", beam_size, 1),
        ("max_input_length", max_input_length, 2),
        ("extra_length", extra_length, 0),
        ("batch_size", batch_size, 1),
    ):
        check_integer(name, value, minimum)
    check_length_penalty(length_penalty)


def translate_lines(
    model: keras.Model,
    tokenizer: SubwordTokenizer,
    lines: Sequence[str],
    *,
    beam_size: int = 4,
    length_penalty: float = 0.6,
    max_input_length: int = DEFAULT_MAX_INPUT_LENGTH,
    extra_length: int = EXTRA_LENGTH,
    batch_size: int = 32,
    progress: bool = False,
    jit_compile: bool = False,
) -> list[str]:
    """Translates sentences with beam search (§6.1) or greedily.

    Sentences are decoded in batches of similar length (sorted by their
    number of subword tokens, then put back in order), with the sources cut
    to ``max_input_length - 1`` tokens + END (`batch_for_eval`'s rule).

    Args:
        model: a model from `build_transformer` (or `load_trained_model`).
        tokenizer: the tokenizer it was trained with.
        lines: the sentences.
        beam_size: hypotheses per sentence (§6.1: 4); 1 decodes greedily.
        length_penalty: `alpha` (§6.1: 0.6); unused by greedy decoding.
        max_input_length: longest source in subword ids, END included.
        extra_length: an output may be this many tokens longer than its
            source (§6.1: 50); capped by the model's learned positions.
        batch_size: sentences decoded together.
        progress: show a `keras.utils.Progbar` (on standard output).
        jit_compile: compile the decoding loop with XLA.

    Returns:
        One detokenized translation per line, in order; ``""`` for a line
        without any subword token.

    Reference: Vaswani et al. (2017), §6.1.
    """
    lines = _check_lines("lines", lines)
    _check_decoding(
        beam_size, length_penalty, max_input_length, extra_length, batch_size
    )
    outputs = [""] * len(lines)
    lengths = [len(ids) for ids in tokenizer.encode(lines)] if lines else []
    order = sorted((i for i, n in enumerate(lengths) if n), key=lambda i: lengths[i])
    bar = keras.utils.Progbar(len(lines), unit_name="sentence") if progress else None
    if not order:
        if bar is not None and lines:
            bar.update(len(lines))
        return outputs
    sentences = tuple(lines[i] for i in order)
    boundaries = [b for b in DEFAULT_BUCKET_BOUNDARIES if b < max_input_length]
    batches = batch_for_eval(
        TextPairs(sentences, sentences),
        tokenizer,
        batch_size=batch_size,
        max_length=max_input_length,
        bucket_boundaries=[*boundaries, max_input_length],
    )
    common = {
        "start_id": tokenizer.START_ID,
        "end_id": tokenizer.END_ID,
        "extra_length": extra_length,
        "jit_compile": jit_compile,
    }
    done = len(lines) - len(order)  # the empty lines
    position = 0
    for source_ids, _ in batches.as_numpy_iterator():
        source_ids = np.asarray(source_ids, "int32")
        if beam_size == 1:
            result = greedy_decode(model, source_ids, **common)
        else:
            result = beam_search(
                model,
                source_ids,
                beam_size=beam_size,
                length_penalty=float(length_penalty),
                **common,
            )
        decoded = tokenizer.decode(result.token_ids.tolist())
        for index, text in zip(
            order[position : position + len(decoded)], decoded, strict=True
        ):
            outputs[index] = text
        position += len(decoded)
        if bar is not None:
            bar.update(done + position)  # finalizes at the last batch
    return outputs


# ---------------------------------------------------------------- scoring
def score_translations(
    hypotheses: Sequence[str], references: Sequence[str]
) -> dict[str, Any]:
    """Corpus sacreBLEU and chrF of detokenized hypotheses against references.

    sacrebleu's defaults (BLEU: 13a tokenization, mixed case, exp smoothing;
    chrF: character 6-grams, beta 2), as `training.evaluate_translations`.

    Returns:
        ``{"bleu", "chrf", "bleu_signature", "chrf_signature",
        "exact_match"}``.
    """
    from sacrebleu.metrics import BLEU, CHRF

    hypotheses = _check_lines("hypotheses", hypotheses)
    references = _check_lines("references", references)
    if len(hypotheses) != len(references):
        raise ValueError(
            f"There are {len(hypotheses)} hypotheses but {len(references)} "
            "references; every sentence needs one of each."
        )
    bleu, chrf = BLEU(), CHRF()
    matches = sum(
        h.strip() == r.strip() for h, r in zip(hypotheses, references, strict=True)
    )
    return {
        "bleu": float(bleu.corpus_score(hypotheses, [references]).score),
        "chrf": float(chrf.corpus_score(hypotheses, [references]).score),
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
        "exact_match": matches / max(1, len(references)),
    }


def _log_scores(result: TestSetEvaluation, log_dir: Path, step: int) -> None:
    """The scores as TensorBoard scalars, the signatures as text."""
    writer = tf.summary.create_file_writer(str(log_dir))
    with writer.as_default(step=step):
        tf.summary.scalar("bleu", result.bleu)
        tf.summary.scalar("chrf", result.chrf)
        tf.summary.scalar("exact_match", result.exact_match)
        tf.summary.text("bleu_signature", result.bleu_signature)
        tf.summary.text("chrf_signature", result.chrf_signature)
        tf.summary.text(
            "decoding",
            f"{result.decoding} on {result.num_sentences} sentences of {result.split}",
        )
    writer.close()


# ------------------------------------------------------------------ models
def load_translator(
    path: str | os.PathLike[str], weights: str = "last"
) -> tuple[keras.Model, SubwordTokenizer]:
    """The model and tokenizer of a training run or of an export folder.

    Args:
        path: a ``keras-transformer train`` work directory (read with
            `training.load_trained_model`), or a folder written by
            `export.export_translator` (its ``model.keras`` and
            ``tokenizer/``).
        weights: for a training run: ``"last"``, ``"best"``, ``"average"`` or
            the path of a checkpoint or ``.weights.h5`` file.
    """
    from keras_transformer.export import is_export_dir, load_export

    path = Path(path)
    if is_export_dir(path):
        model, tokenizer, _ = load_export(path)
        return model, tokenizer
    if not path.is_dir():
        raise FileNotFoundError(
            f"{path} does not exist. Pass the --workdir of a `keras-transformer "
            "train` run or a folder written by `keras-transformer export`."
        )
    from keras_transformer.training import load_trained_model

    model, tokenizer, _ = load_trained_model(path, weights=weights)
    return model, tokenizer


def evaluate(
    model_or_workdir: keras.Model | str | os.PathLike[str],
    source_sentences: Sequence[str],
    references: Sequence[str],
    *,
    tokenizer: SubwordTokenizer | None = None,
    weights: str = "last",
    beam_size: int = 4,
    length_penalty: float = 0.6,
    max_input_length: int = DEFAULT_MAX_INPUT_LENGTH,
    extra_length: int = EXTRA_LENGTH,
    batch_size: int = 32,
    hypotheses_path: str | os.PathLike[str] | None = None,
    log_dir: str | os.PathLike[str] | None = None,
    step: int = 0,
    split: str = "test",
    progress: bool = False,
) -> TestSetEvaluation:
    """Translates a test set and scores it with sacreBLEU and chrF (§6.1).

    Beam search with beam 4 and alpha 0.6, outputs up to the source length +
    50 tokens, as in the paper (§6.1); ``beam_size=1`` decodes greedily.

    Args:
        model_or_workdir: a Keras model (then pass `tokenizer`), a training
            work directory, or an export folder (see `load_translator`).
        source_sentences: the test sources.
        references: one reference translation per source.
        tokenizer: the model's tokenizer (only with a model).
        weights: which weights of a training run (``"last"``, ``"best"``,
            ``"average"``, or a path).
        beam_size, length_penalty, max_input_length, extra_length,
            batch_size: as for `translate_lines`.
        hypotheses_path: write the translations there, one per line (UTF-8).
        log_dir: log ``bleu``, ``chrf`` and ``exact_match`` (scalars) and the
            sacrebleu signatures (text) there for TensorBoard.
        step: the TensorBoard step (e.g. the checkpoint's training step).
        split: a name for the test set, e.g. ``"test_2016_flickr"``.
        progress: show a progress bar.

    Returns:
        A `TestSetEvaluation`: ``bleu``, ``chrf`` (0-100), their sacrebleu
        signatures, ``exact_match``, and every translation.

    Reference: Vaswani et al. (2017), §6.1; Post (2018), "A Call for Clarity
    in Reporting BLEU Scores".
    """
    sources = _check_lines("source_sentences", source_sentences)
    references = _check_lines("references", references)
    if len(sources) != len(references):
        raise ValueError(
            f"evaluate got {len(sources)} source sentences but {len(references)} "
            "references; pass one reference per source, in the same order."
        )
    if isinstance(model_or_workdir, keras.Model):
        if tokenizer is None:
            raise ValueError(
                "evaluate(model, ...) needs the model's tokenizer: pass "
                "tokenizer=..., or pass the run's work directory instead of the "
                "model."
            )
        model = model_or_workdir
    else:
        if tokenizer is not None:
            raise ValueError(
                "Pass `tokenizer` only with a model: a work directory or export "
                "folder brings its own tokenizer."
            )
        model, tokenizer = load_translator(model_or_workdir, weights)
    hypotheses = translate_lines(
        model,
        tokenizer,
        sources,
        beam_size=beam_size,
        length_penalty=length_penalty,
        max_input_length=max_input_length,
        extra_length=extra_length,
        batch_size=batch_size,
        progress=progress,
    )
    if hypotheses_path is not None:
        write_lines(hypotheses_path, hypotheses)
    scores = score_translations(hypotheses, references)
    result = TestSetEvaluation(
        split=split,
        num_sentences=len(references),
        translations=tuple(
            Translation(s, r, h)
            for s, r, h in zip(sources, references, hypotheses, strict=True)
        ),
        beam_size=beam_size,
        length_penalty=float(length_penalty),
        hypotheses_path=None if hypotheses_path is None else str(hypotheses_path),
        log_dir=None if log_dir is None else str(log_dir),
        **scores,
    )
    if log_dir is not None:
        _log_scores(result, Path(log_dir), step)
    return result


# ------------------------------------------------------------------- files
def read_lines(path: str | os.PathLike[str] | None) -> list[str]:
    """The lines of a UTF-8 text file (or of standard input for None / "-").

    Lines are split on ``"\\n"`` only (a trailing ``"\\r"`` is removed), so the
    count matches ``wc -l``; a final line without newline counts too.
    """
    if path is None or str(path) == "-":
        data = sys.stdin.buffer.read()
        name = "standard input"
    else:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist (or is not a file).")
        data = path.read_bytes()
        name = str(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ValueError(
            f"{name} is not valid UTF-8 (line {line}, byte {e.start}). Convert it, "
            "e.g. with `iconv -f latin1 -t utf-8`."
        ) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def write_lines(path: str | os.PathLike[str] | None, lines: Sequence[str]) -> None:
    """Writes one line per string, UTF-8 (standard output for None / "-")."""
    data = "".join(f"{line}\n" for line in lines).encode("utf-8")
    if path is None or str(path) == "-":
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


# --------------------------------------------------------------------- CLI
def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """``--workdir`` and ``--weights``: which trained model to load."""
    parser.add_argument(
        "--workdir",
        required=True,
        help="A training run folder (keras-transformer train --workdir), or a "
        "folder written by keras-transformer export.",
    )
    parser.add_argument(
        "--weights",
        default="last",
        help="Which weights of a training run: last, best, average, or the path "
        "of a checkpoint or .weights.h5 file (default: last).",
    )


def add_search_arguments(
    parser: argparse.ArgumentParser,
    *,
    max_input_length: int | None = DEFAULT_MAX_INPUT_LENGTH,
    max_input_length_help: str = f"(default {DEFAULT_MAX_INPUT_LENGTH})",
    batch_size: bool = True,
) -> None:
    """The beam search options of §6.1 shared by evaluate, translate, export."""
    parser.add_argument(
        "--beam-size", type=int, default=4, help="Beam size (§6.1: 4); 1: greedy."
    )
    parser.add_argument(
        "--length-penalty",
        type=float,
        default=0.6,
        help="Length penalty alpha (§6.1: 0.6).",
    )
    parser.add_argument(
        "--max-input-length",
        type=int,
        default=max_input_length,
        help="Longest source in subword ids, END included; longer ones are cut "
        + max_input_length_help
        + ".",
    )
    parser.add_argument(
        "--extra-length",
        type=int,
        default=EXTRA_LENGTH,
        help="An output may be this many tokens longer than its source (§6.1: 50).",
    )
    if batch_size:
        parser.add_argument(
            "--batch-size", type=int, default=32, help="Sentences decoded together."
        )


def add_evaluate_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``keras-transformer evaluate``."""
    add_model_arguments(parser)
    data = parser.add_argument_group(
        "test set",
        "Either --source and --reference files, or a data set split (by default "
        "the test split of the run's task).",
    )
    data.add_argument("--source", help="File of source sentences, one per line.")
    data.add_argument(
        "--reference", help="File of reference translations, line by line."
    )
    data.add_argument(
        "--task",
        choices=tuple(_DEFAULT_SPLITS),
        help="Data set (default: the run's data.task).",
    )
    data.add_argument(
        "--split",
        help="Split of the task: multi30k train/val/test_2016_flickr (default), "
        "tatoeba train/val/test, dates or files train/validation/test.",
    )
    data.add_argument(
        "--data-dir", help="Folder of the data set's files (default: the run's)."
    )
    data.add_argument("--source-language", help="Default: the run's.")
    data.add_argument("--target-language", help="Default: the run's.")
    data.add_argument(
        "--max-sentences",
        type=int,
        default=None,
        help="Evaluate only the first N sentences.",
    )
    add_search_arguments(parser)
    parser.add_argument(
        "--hypotheses",
        help="Where to write the translations (default for a training run: "
        "<workdir>/translations/<split>.beam<K>.<weights>.txt).",
    )
    parser.add_argument(
        "--log-dir",
        help="TensorBoard folder for the scores (default for a training run: "
        "<workdir>/logs/evaluate_<split>_beam<K>).",
    )
    parser.add_argument(
        "--step",
        type=int,
        default=None,
        help="TensorBoard step (default: the training step of the weights, if "
        "known, else 0).",
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="Do not show a progress bar."
    )
    parser.add_argument("--json", action="store_true", help="Print the scores as JSON.")


def _run_config(workdir: Path) -> Any:
    """The TrainConfig of a training run, or None (e.g. for an export folder)."""
    from keras_transformer.training import TrainConfig
    from keras_transformer.training.checkpoints import CONFIG_FILE

    path = workdir / CONFIG_FILE
    return TrainConfig.load(path) if path.is_file() else None


def _task_pairs(args: argparse.Namespace, config: Any) -> tuple[TextPairs, str]:
    """The test pairs named by --task/--split (or the run's), and their name."""
    from keras_transformer import data as kt_data
    from keras_transformer.training import DataConfig

    data_config = config.data if config is not None else None
    task = args.task or (data_config.task if data_config is not None else None)
    if task is None:
        raise ValueError(
            f"{args.workdir} is not a training run, so the test set is unknown: "
            "pass --source FILE --reference FILE, or --task (and --split)."
        )
    split = args.split or _DEFAULT_SPLITS[task]
    if data_config is None or data_config.task != task:
        data_config = DataConfig(task=task)
    changes = {
        name: value
        for name, value in (
            ("data_dir", args.data_dir),
            ("source_language", args.source_language),
            ("target_language", args.target_language),
        )
        if value is not None
    }
    data_config = dataclasses.replace(data_config, **changes)
    if task == "multi30k":
        pairs = kt_data.load_multi30k(
            split,  # type: ignore[arg-type]
            data_config.source_language,  # type: ignore[arg-type]
            data_config.target_language,  # type: ignore[arg-type]
            data_dir=data_config.data_dir,
        )
    elif task == "tatoeba":
        pairs = kt_data.load_tatoeba_spa_eng(
            split,  # type: ignore[arg-type]
            data_dir=data_config.data_dir,
            direction=data_config.direction,  # type: ignore[arg-type]
        )
    else:
        from keras_transformer.training.pipeline import load_task

        if split not in ("train", "validation", "test"):
            raise ValueError(
                f"--split {split!r} is not a split of task {task!r}: use train, "
                "validation or test."
            )
        if task == "dates" and split != "train":
            # Only the asked split is needed; the others use their own seeds.
            data_config = dataclasses.replace(data_config, num_train_examples=1)
        seed = config.train.seed if config is not None else 0
        task_data = load_task(data_config, seed=seed)
        pairs = getattr(task_data, split)
        if split == "test":
            split = task_data.test_name
    return pairs, split


def _test_set(args: argparse.Namespace, workdir: Path) -> tuple[list, list, str]:
    """(sources, references, name) from --source/--reference or a data set."""
    if args.source or args.reference:
        if not (args.source and args.reference):
            raise ValueError(
                "Pass both --source and --reference (line-aligned files), or "
                "neither to use a data set split."
            )
        sources, references = read_lines(args.source), read_lines(args.reference)
        if len(sources) != len(references):
            raise ValueError(
                f"{args.source} has {len(sources)} lines but {args.reference} has "
                f"{len(references)}: the files must be line-aligned."
            )
        name = Path(args.source).name
    else:
        pairs, name = _task_pairs(args, _run_config(workdir))
        sources, references = list(pairs.sources), list(pairs.targets)
    if args.max_sentences is not None:
        if args.max_sentences < 1:
            raise ValueError(
                f"--max-sentences must be positive. Received: {args.max_sentences}"
            )
        sources = sources[: args.max_sentences]
        references = references[: args.max_sentences]
    if not sources:
        raise ValueError("The test set is empty: there is nothing to evaluate.")
    return sources, references, name


def _weights_label(weights: str) -> str:
    return weights if weights in ("last", "best", "average") else "custom"


def _weights_step(workdir: Path, weights: str) -> int:
    """The training step of the weights of a run (0 when unknown)."""
    from keras_transformer.training import checkpoints

    try:
        if weights == "last":
            paths = checkpoints.checkpoint_paths(workdir / checkpoints.CHECKPOINT_DIR)
            return checkpoints.checkpoint_step(paths[-1]) if paths else 0
        if weights == "best":
            info = json.loads((workdir / checkpoints.BEST_INFO).read_text())
            return int(info["step"])
        if weights == "average":
            info_path = workdir / checkpoints.AVERAGED_WEIGHTS.replace(
                ".weights.h5", ".json"
            )
            return int(json.loads(info_path.read_text())["steps"][-1])
    except (OSError, ValueError, KeyError, IndexError):
        return 0
    return 0


def run_evaluate(args: argparse.Namespace) -> int:
    """``keras-transformer evaluate``: translates a test set, prints BLEU and chrF."""
    from keras_transformer.export import is_export_dir

    workdir = Path(args.workdir)
    sources, references, split = _test_set(args, workdir)
    model, tokenizer = load_translator(workdir, args.weights)
    is_run = not is_export_dir(workdir)
    stem = f"{split}.beam{args.beam_size}"
    hypotheses_path = args.hypotheses
    if hypotheses_path is None and is_run:
        hypotheses_path = (
            workdir / "translations" / f"{stem}.{_weights_label(args.weights)}.txt"
        )
    log_dir = args.log_dir
    if log_dir is None and is_run:
        log_dir = workdir / "logs" / f"evaluate_{split}_beam{args.beam_size}"
    step = args.step
    if step is None:
        step = _weights_step(workdir, args.weights) if is_run else 0
    progress = not args.no_progress and not args.json
    with contextlib.redirect_stdout(sys.stderr):
        result = evaluate(
            model,
            sources,
            references,
            tokenizer=tokenizer,
            beam_size=args.beam_size,
            length_penalty=args.length_penalty,
            max_input_length=args.max_input_length,
            extra_length=args.extra_length,
            batch_size=args.batch_size,
            hypotheses_path=hypotheses_path,
            log_dir=log_dir,
            step=step,
            split=split,
            progress=progress,
        )
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(result.summary())
        if hypotheses_path is not None:
            print(f"Hypotheses: {hypotheses_path}")
        if log_dir is not None:
            print(f"TensorBoard: tensorboard --logdir {log_dir}")
    return 0


def add_translate_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``keras-transformer translate``."""
    add_model_arguments(parser)
    parser.add_argument(
        "--input",
        default="-",
        help="File of sentences, one per line (default: standard input).",
    )
    parser.add_argument(
        "--output",
        default="-",
        help="Where to write the translations, one per line (default: standard "
        "output).",
    )
    add_search_arguments(parser)
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="No progress bar (shown on standard error when --input is a file).",
    )


def run_translate(args: argparse.Namespace) -> int:
    """``keras-transformer translate``: one translation per input line."""
    lines = read_lines(args.input)
    model, tokenizer = load_translator(args.workdir, args.weights)
    progress = str(args.input) != "-" and not args.no_progress
    # The progress bar goes to standard error, the translations may go to
    # standard output.
    with contextlib.redirect_stdout(sys.stderr):
        outputs = translate_lines(
            model,
            tokenizer,
            lines,
            beam_size=args.beam_size,
            length_penalty=args.length_penalty,
            max_input_length=args.max_input_length,
            extra_length=args.extra_length,
            batch_size=args.batch_size,
            progress=progress,
        )
    write_lines(args.output, outputs)
    return 0
