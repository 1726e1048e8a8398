"""Keras callbacks of a training run: NaN guard, summaries, BLEU, best weights,
attention images (its checkpoints: `keras_transformer.training.epoch_end`).

All summaries are written against the optimizer step (the number of
updates, which survives a restart) rather than Keras' epoch or batch index.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.data import SubwordTokenizer, TextPairs
from keras_transformer.data.batching import encode_sources
from keras_transformer.files import read_json_object
from keras_transformer.runs import (
    BEST_WEIGHTS,
    RunFingerprint,
    save_weights,
)
from keras_transformer.runs.weights import weights_info_file, weights_info_of_file
from keras_transformer.training.config import TrainConfig
from keras_transformer.training.progress_logger import (
    current_learning_rate,
    optimizer_step,
)

__all__ = [
    "AttentionImages",
    "BestValidationWeights",
    "BestWeights",
    "NaNGuard",
    "StopAtStep",
    "TrainingSummaries",
    "TranslationEvaluator",
    "ValidationTranslations",
    "has_diverged",
    "write_hparams",
    "write_skipped_pairs",
]

logger = logging.getLogger(__name__)


def _finite(logs: dict[str, Any] | None) -> bool:
    value = (logs or {}).get("loss")
    return value is None or math.isfinite(float(value))


class TranslationEvaluator:
    """Greedy translation and scoring of pairs with a run's decoding settings.

    Calls `kt.training.evaluation.evaluate_translations` with the run's
    source cap (`data.max_sentence_length`), output allowance
    (`train.extra_length`, §6.1: "input length + 50"), the model's
    positions (`model.max_length`) and the buckets. Used for the validation
    BLEU during training and for the final test evaluation.

    Args:
        config: the run's settings.
    """

    def __init__(self, config: TrainConfig) -> None:
        self.config = config

    def __call__(
        self,
        model: keras.Model,
        tokenizer: SubwordTokenizer,
        pairs: TextPairs,
        split: str = "validation",
    ) -> Any:
        from keras_transformer.training.evaluation import evaluate_translations

        return evaluate_translations(
            model,
            tokenizer,
            pairs,
            split=split,
            max_length=self.config.data.max_sentence_length,
            extra_length=self.config.train.extra_length,
            output_max_length=self.config.model.max_length,
            bucket_boundaries=self.config.data.bucket_boundaries,
        )


class NaNGuard(keras.callbacks.TerminateOnNaN):
    """Stops training at the first NaN or infinite loss, and remembers where.

    `train()` then raises a `TrainingDivergedError` naming the step, instead
    of saving a checkpoint of broken weights.
    """

    def __init__(self) -> None:
        super().__init__()
        self.bad_step: int | None = None
        self.bad_loss: float | None = None

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if not _finite(logs):
            self.bad_step = optimizer_step(self.model)
            self.bad_loss = float(logs["loss"])
            self.model.stop_training = True

    def on_batch_end(self, batch: int, logs: dict | None = None) -> None:
        return None


def has_diverged(nan_guard: NaNGuard | None) -> bool:
    """Whether `nan_guard` (a run's `NaNGuard`; None: no guard) saw a NaN
    or infinite loss: then no checkpoint is saved of the broken weights."""
    return nan_guard is not None and nan_guard.bad_step is not None


class StopAtStep(keras.callbacks.Callback):
    """Ends training once the optimizer has made `steps` updates."""

    def __init__(self, steps: int) -> None:
        super().__init__()
        self.steps = steps

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if optimizer_step(self.model) >= self.steps:
            self.model.stop_training = True


class TrainingSummaries(keras.callbacks.Callback):
    """Scalars every `log_every` updates: loss, accuracy, perplexity, learning rate.

    Written into ``<log_dir>/train`` with the optimizer step as the x axis;
    the validation values of each epoch (``loss``, ``token_accuracy``,
    ``perplexity``) go to ``<log_dir>/validation``. This is the one writer of
    these scalars: a run has no `keras.callbacks.TensorBoard` (whose
    ``epoch_*`` copies would show each quantity twice). `names` chooses the
    logged quantities (an image model logs ``loss`` and ``bits_per_dim``).
    """

    def __init__(
        self,
        log_dir: Path,
        log_every: int,
        names: tuple[str, ...] = ("loss", "token_accuracy", "perplexity"),
    ) -> None:
        super().__init__()
        self.log_every = log_every
        self.names = tuple(names)
        self.train_writer = tf.summary.create_file_writer(str(log_dir / "train"))
        self.validation_writer = tf.summary.create_file_writer(
            str(log_dir / "validation")
        )
        self._rate_step: int | None = None

    def _write_learning_rate(self, step: int) -> None:
        if step != self._rate_step:  # one point per step
            tf.summary.scalar(
                "learning_rate", current_learning_rate(self.model), step=step
            )
            self._rate_step = step

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        step = optimizer_step(self.model)
        if step % self.log_every or not logs:
            return
        with self.train_writer.as_default(step=step):
            for name in self.names:
                if name in logs:
                    tf.summary.scalar(name, float(logs[name]))
            self._write_learning_rate(step)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        step = optimizer_step(self.model)
        logs = logs or {}
        with self.train_writer.as_default(step=step):
            self._write_learning_rate(step)
        with self.validation_writer.as_default(step=step):
            for name in self.names:
                if f"val_{name}" in logs:
                    tf.summary.scalar(name, float(logs[f"val_{name}"]))
        self.train_writer.flush()
        self.validation_writer.flush()

    def on_train_end(self, logs: dict | None = None) -> None:
        self.train_writer.flush()
        self.validation_writer.flush()


def _best_so_far(weights: Path, name: str) -> tuple[float | None, int | None]:
    """The value `name` and its step in the info file of `weights` (None,
    None when it has no value of that name); a damaged file is one line
    naming it and saying what to do."""
    info = weights_info_file(weights)
    remedy = (
        f"restore it from a copy, or delete it and {weights.name} to keep the "
        "best weights from the next validation on."
    )
    # The weights file's own record first: the .json beside it may be the
    # one of the file before (a kill between the two writes).
    saved = weights_info_of_file(weights)
    if saved is None:
        if not info.is_file():
            return None, None
        saved = read_json_object(info, remedy)
    if name not in saved:
        return None, None
    value, step = saved[name], saved.get("step")
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    finite = numeric and math.isfinite(value)
    if not finite or not isinstance(step, int) or isinstance(step, bool):
        raise ValueError(
            f"{info} holds {name}={value!r} at step={step!r}, not a finite number "
            f"at a step: {remedy}"
        )
    return float(value), step


class BestWeights:
    """The best validation value so far and, with a `path`, its weights.

    What every kind keeps of its validation: translation the best BLEU,
    classification the best accuracy, images the lowest bits per dimension.
    `offer` takes each new value; a better one (or the first) replaces the
    weights file (``best.weights.h5``) and its info file (``best.json``:
    ``{name: value, "step": ...}`` and the run's fingerprint), each whole. A
    resumed run starts from the value in the info file, so it never
    replaces better weights with worse ones.

    Args:
        model: the model whose weights are kept.
        path: the weights file, or ``None`` to keep only the value
            (``train.keep_best=false``).
        name: the key of the value in the info file (``"bleu"``).
        lower_is_better: True for a loss (bits per dimension).
        fingerprint: the run's, checked by the readers of the weights.
    """

    def __init__(
        self,
        model: keras.Model,
        path: Path | None,
        name: str,
        *,
        lower_is_better: bool = False,
        fingerprint: RunFingerprint | None = None,
    ) -> None:
        self.model = model
        self.path = path
        self.name = name
        self.lower_is_better = lower_is_better
        self.fingerprint = fingerprint
        self.value: float | None = None
        self.step: int | None = None
        if path is not None and path.is_file():
            self.value, self.step = _best_so_far(path, name)

    @classmethod
    def of_run(
        cls, run: Any, name: str, *, lower_is_better: bool = False
    ) -> BestWeights:
        """For the run being trained (a `recipes.RunContext`): its model, its
        ``best.weights.h5`` when ``train.keep_best`` (else the value only),
        its fingerprint."""
        keep = run.config.train.keep_best
        return cls(
            run.model,
            run.root / BEST_WEIGHTS if keep else None,
            name,
            lower_is_better=lower_is_better,
            fingerprint=run.fingerprint,
        )

    def is_better(self, value: float) -> bool:
        """Whether `value` beats the best so far (any finite value beats none)."""
        if not math.isfinite(value):
            return False
        if self.value is None:
            return True
        return value < self.value if self.lower_is_better else value > self.value

    def offer(self, value: float, step: int) -> bool:
        """Keeps `value` (and the weights) when it is better; says whether it was."""
        if not self.is_better(value):
            return False
        if self.path is not None:
            # A full disk keeps the previous pair and stops with one line.
            save_weights(
                self.model,
                self.path,
                {self.name: value, "step": step},
                self.fingerprint,
            )
        self.value, self.step = value, step
        return True


class BestValidationWeights(keras.callbacks.Callback):
    """Keeps the weights of the best value of a validation metric of `fit`.

    After each epoch with a validation, the value of `metric` in the logs
    (e.g. ``val_accuracy``, ``val_bits_per_dim``) is offered to `best` (see
    `BestWeights`: ``best.weights.h5`` and ``best.json``).

    Args:
        metric: the key of the validation value in `fit`'s logs.
        best: what keeps the best value and its weights.
    """

    def __init__(self, metric: str, best: BestWeights) -> None:
        super().__init__()
        self.metric = metric
        self.best = best

    @property
    def best_value(self) -> float | None:
        """The best validation value so far (None before the first)."""
        return self.best.value

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        value = (logs or {}).get(self.metric)
        if value is None or not _finite(logs):
            return
        self.best.offer(
            float(np.asarray(value).reshape(-1)[0]), optimizer_step(self.model)
        )


class ValidationTranslations(keras.callbacks.Callback):
    """Greedy translations of validation pairs: BLEU, chrF, exact matches.

    Every `every` epochs, the `pairs` are translated greedily; their
    sacreBLEU, chrF and exact-match rate go into the epoch's logs (as
    ``val_bleu``, ``val_chrf``, ``val_exact_match``) and into TensorBoard,
    with the translation of one fixed sentence as text. With `best_weights`
    set, the weights with the best BLEU are saved there (and ``best.json``).

    Args:
        transformer: the model being trained.
        tokenizer: the shared tokenizer.
        pairs: the validation pairs to translate.
        evaluate: ``(model, tokenizer, pairs) -> EvaluationResult``.
        log_dir: TensorBoard log folder (``validation`` below it).
        every: epochs between two evaluations.
        attention_example: index into `pairs` of the sentence whose
            translation is logged as text.
        draw_attention: ``sentence -> image`` (uint8 ``(1, h, w, c)``); a
            run draws its attention maps with `AttentionImages` instead.
        best_weights: where to save the best weights, or ``None``.
        fingerprint: the run's, saved in ``best.json`` and checked by the
            readers of the best weights.
    """

    def __init__(
        self,
        transformer: keras.Model,
        tokenizer: SubwordTokenizer,
        pairs: TextPairs,
        evaluate: Callable[..., Any],
        log_dir: Path,
        every: int = 1,
        attention_example: int = 0,
        draw_attention: Callable[[str], np.ndarray] | None = None,
        best_weights: Path | None = None,
        fingerprint: RunFingerprint | None = None,
    ) -> None:
        super().__init__()
        self.transformer = transformer
        self.fingerprint = fingerprint
        self.tokenizer = tokenizer
        self.pairs = pairs
        self.evaluate = evaluate
        self.every = every
        self.attention_example = attention_example
        self.draw_attention = draw_attention
        self.best_weights = best_weights
        self.writer = tf.summary.create_file_writer(str(log_dir / "validation"))
        self.best = BestWeights(
            transformer, best_weights, "bleu", fingerprint=fingerprint
        )

    @property
    def best_bleu(self) -> float | None:
        """The best validation BLEU so far (None before the first)."""
        return self.best.value

    @property
    def best_step(self) -> int | None:
        """The step of `best_bleu`."""
        return self.best.step

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if (epoch + 1) % self.every or not len(self.pairs):
            return
        if logs is not None and not _finite(logs):
            return
        step = optimizer_step(self.model)
        result = self.evaluate(self.transformer, self.tokenizer, self.pairs)
        if logs is not None:
            logs["val_bleu"] = result.bleu
            logs["val_chrf"] = result.chrf
            logs["val_exact_match"] = result.exact_match
        with self.writer.as_default(step=step):
            tf.summary.scalar("bleu", result.bleu)
            tf.summary.scalar("chrf", result.chrf)
            tf.summary.scalar("exact_match", result.exact_match)
            example = min(self.attention_example, len(self.pairs) - 1)
            translation = result.translations[example]
            tf.summary.text(
                "translation",
                f"**source:** {translation.source}  \n"
                f"**reference:** {translation.reference}  \n"
                f"**output:** {translation.hypothesis}",
            )
            if self.draw_attention is not None:
                try:
                    image = self.draw_attention(translation.source)
                    tf.summary.image("attention/encoder_decoder", image, step=step)
                except Exception as e:  # noqa: BLE001 - a picture must not stop training
                    logger.warning("Could not draw the attention maps: %s", e)
        self.writer.flush()
        self.best.offer(result.bleu, step)


class AttentionImages(keras.callbacks.Callback):
    """The attention of one fixed sentence, as TensorBoard images.

    Every `every` epochs the model translates `sentence` greedily and its
    attention maps (Figures 3-5 of the paper show such maps) are written to
    ``<log_dir>/validation``, one image per layer and kind of attention with
    every head of the layer in a grid: ``attention/encoder_self/layer_<i>``,
    ``attention/decoder_self/layer_<i>`` and
    ``attention/encoder_decoder/layer_<i>``. A failure to draw is logged,
    never raised: a picture must not stop training.

    Args:
        transformer: the model being trained.
        tokenizer: the shared tokenizer.
        sentence: the source sentence drawn.
        config: the run's settings (source cap, `train.extra_length`,
            `model.max_length`).
        log_dir: TensorBoard log folder.
        every: epochs between two images.
    """

    def __init__(
        self,
        transformer: keras.Model,
        tokenizer: SubwordTokenizer,
        sentence: str,
        config: TrainConfig,
        log_dir: Path,
        every: int = 1,
    ) -> None:
        super().__init__()
        self.transformer = transformer
        self.tokenizer = tokenizer
        self.sentence = sentence
        self.config = config
        self.every = every
        self.writer = tf.summary.create_file_writer(str(log_dir / "validation"))

    def _translation(self) -> tuple[list[int], Any]:
        from keras_transformer.training.evaluation import greedy_output_ids

        # The source as every translation sees it (the one source-cut rule).
        encoded = encode_sources(
            self.tokenizer, [self.sentence], self.config.data.max_sentence_length
        )
        source_ids = [int(i) for i in encoded[0].numpy()]
        output = greedy_output_ids(
            self.transformer,
            source_ids,
            extra_length=self.config.train.extra_length,
            output_max_length=self.config.model.max_length,
        )
        return source_ids, output

    def image(self) -> np.ndarray:
        """The encoder-decoder attention of the last layer (every head)."""
        from keras_transformer.training.attention_images import attention_image

        source_ids, output = self._translation()
        return attention_image(self.transformer, self.tokenizer, source_ids, output)

    def images(self) -> dict[str, np.ndarray]:
        """Every layer and kind: ``{"attention/<kind>/layer_<i>": image}``."""
        from keras_transformer.training.attention_images import attention_images

        source_ids, output = self._translation()
        return attention_images(self.transformer, self.tokenizer, source_ids, output)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if (epoch + 1) % self.every or (logs is not None and not _finite(logs)):
            return
        try:
            images = self.images()
        except Exception as e:  # noqa: BLE001 - a picture must not stop training
            logger.warning("Could not draw the attention maps: %s", e)
            return
        with self.writer.as_default(step=optimizer_step(self.model)):
            for tag, image in images.items():
                tf.summary.image(tag, image)
        self.writer.flush()


def write_skipped_pairs(
    log_dir: Path, skipped: list[dict[str, Any]], step: int = 0
) -> None:
    """Writes what reading the data dropped as the text ``data/skipped``.

    Args:
        log_dir: the run's log folder; the text goes to its ``train`` run.
        skipped: `TaskData.skipped()`: per split its files, the pairs kept
            and the pairs skipped by reason.
        step: the step of the summary (0 on a fresh run).
    """
    lines = [
        f"* **{entry['split']}** ({', '.join(entry['files']) or 'generated'}): "
        f"{entry['summary']}"
        for entry in skipped
    ]
    if not any(sum(entry["skipped"].values()) for entry in skipped):
        lines.insert(0, "No sentence pairs were skipped while reading the data.\n")
    writer = tf.summary.create_file_writer(str(log_dir / "train"))
    with writer.as_default(step=step):
        tf.summary.text("data/skipped", "\n".join(lines))
    writer.flush()
    writer.close()


def write_hparams(
    log_dir: Path,
    hparams: dict[str, Any],
    trial_id: str,
    metrics: list[tuple[str, str]],
    session: str | None = None,
) -> None:
    """Records the run's settings with TensorBoard's HParams plugin.

    TensorBoard finds a metric in the run ``<session>/<group>``, where the
    session is the run that holds the settings. A session in the log folder
    itself is the run ``"."``, and ``./validation`` is no run (the run is
    ``validation``): its metrics would stay empty. So the settings go into
    the metrics' run (``<log_dir>/<session>``), and the metrics' groups are
    taken relative to it.

    Args:
        log_dir: the run's log folder.
        hparams: flat settings; lists and integers become strings (the
            HParams view prints numbers with five digits, 512 as 512.00).
        trial_id: a name for the run.
        metrics: ``(tag, run)`` pairs shown next to the settings, the run
            relative to `log_dir`, e.g. ``("bleu", "validation")``.
        session: the run (below `log_dir`) that records the settings; every
            metric's run must be it or below it. `None`: the metrics' run
            when they all have the same one.

    Raises:
        ValueError: when the metrics are not all in `session` (or, without a
            session, not all in one run).
    """
    from tensorboard.plugins.hparams import api as hp

    runs = {group.strip("/") for _, group in metrics}
    if session is None:
        if len(runs) != 1 or "" in runs:
            raise ValueError(
                "write_hparams needs `session` when the metrics are not all in "
                f"one run below the log folder. Received runs: {sorted(runs)}"
            )
        session = runs.pop()
    session = session.strip("/")
    relative: list[tuple[str, str, str]] = []
    for tag, group in metrics:
        group = group.strip("/")
        if group != session and not group.startswith(f"{session}/"):
            raise ValueError(
                f"The metric {group}/{tag} is not in the session run {session!r} "
                "or below it, so TensorBoard's HParams could not find it."
            )
        relative.append((tag, group[len(session) :].strip("/"), f"{group}/{tag}"))

    values: dict[str, Any] = {}
    for key, value in hparams.items():
        if value is None:
            value = "none"
        elif isinstance(value, (list, tuple)):
            value = ",".join(map(str, value))
        elif isinstance(value, int) and not isinstance(value, bool):
            # TensorBoard keeps every number as a double and prints it with
            # five digits ("512.00"); an integer setting reads as one.
            value = str(value)
        values[key] = value
    writer = tf.summary.create_file_writer(str(log_dir / session))
    with writer.as_default():
        hp.hparams_config(
            hparams=[hp.HParam(key) for key in values],
            metrics=[
                hp.Metric(tag, group=group, display_name=name)
                for tag, group, name in relative
            ],
        )
        hp.hparams(values, trial_id=trial_id)
    writer.flush()
    writer.close()
