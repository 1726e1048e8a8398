"""The recipe of a kind of run: everything that kind does differently.

One `keras_transformer.training.train` runs every kind of model: it owns
the run folder (lock, ``config.json``, resume, damaged-checkpoint fallback,
fingerprints), the tokenizer, the distribution strategy, the precision,
gradient accumulation, preemption, the callbacks shared by every kind
(NaN guard, checkpoints, summaries, progress) and the final evaluation's
place in the run. What differs between kinds is a `Recipe`: its config
section and model section, how the data is read and the tokenizer learned,
how the model, its optimizer and its trainer are built, the data streams,
the validation callback and the metric it keeps the best weights by, the
final evaluation, the commands that use its runs and the run's one-line
plan.

A new kind is one module with a `Recipe` subclass and one line in
`keras_transformer.training`'s ``__init__`` that registers it
(`kinds.register_recipe`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf

from keras_transformer import runs
from keras_transformer.data import SubwordTokenizer
from keras_transformer.models import TransformerConfig
from keras_transformer.training import checks
from keras_transformer.training.config import TrainConfig, resolve_text_sections
from keras_transformer.training.kinds import recipe_for

__all__ = [
    "Evaluation",
    "Recipe",
    "RunContext",
    "SplitsWithoutSkips",
    "evaluate_run",
    "stored_run",
]


class SplitsWithoutSkips:
    """The data of a kind whose readers refuse a bad example instead of
    skipping it: nothing to report in ``result.json`` or TensorBoard. A
    subclass (a dataclass) holds the ``train``, ``validation`` and ``test``
    splits; its test split is named ``test``."""

    test_name = "test"

    def skipped(self) -> list[dict[str, Any]]:
        return []

    def skip_messages(self) -> list[str]:
        return []


class Evaluation:
    """A final evaluation without outputs to list: ``to_dict`` is its fields
    (a subclass is a dataclass with a ``summary()``)."""

    def to_dict(self, num_examples: int = 0) -> dict[str, Any]:
        del num_examples  # no outputs to list
        return dataclasses.asdict(self)


@dataclasses.dataclass
class RunContext:
    """What a recipe's callbacks and evaluation see of the run being trained.

    Attributes:
        config: the run's `TrainConfig`.
        root: the run folder.
        log_dir: its TensorBoard folder.
        model: the model being trained.
        tokenizer: the run's tokenizer (None for a kind without one).
        data: what the recipe's `load_data` returned.
        fingerprint: the run's fingerprint (written into its weights files).
        initial_step: the update the run started (or resumed) from.
        say: where progress messages go.
    """

    config: Any
    root: Path
    log_dir: Path
    model: keras.Model
    tokenizer: SubwordTokenizer | None
    data: Any
    fingerprint: runs.RunFingerprint | None
    initial_step: int
    say: Callable[[str], None]


class Recipe:
    """One kind of run: what `train` asks of it.

    The data object `load_data` returns has ``train``, ``validation`` and
    ``test`` splits (each with ``len``), ``test_name``, ``skipped()`` (what
    reading dropped, for ``result.json``) and ``skip_messages()``.
    """

    #: The kind's name (``config.kind``).
    kind = ""
    #: The dataclass of the kind's own config section, named after the kind
    #: (``--set <kind>.<key>=...``), or None for a kind without one.
    settings: type | None = None
    #: The class of the ``model`` section (a text kind's also takes a preset).
    model_config: type = TransformerConfig
    #: The ``model`` section of a config that leaves it out.
    default_model: Any = "tiny"
    #: Whether the kind reads the ``data`` section (a kind that reads its
    #: data from its own section neither takes nor writes one).
    reads_data_section = True
    #: Whether ``keras-transformer evaluate`` scores a stored run with
    #: `evaluate_saved` (translation runs are scored by the translator).
    evaluates_stored_runs = True
    #: What the command line does with a run of this kind (in the message
    #: of a command given a run of another kind).
    output_commands = "evaluate it"
    #: What ``keras-transformer train`` suggests doing with the finished run:
    #: ``(what it does, the command, its other arguments...)``; the command
    #: takes ``--workdir RUN`` before them.
    try_it: tuple[str, ...] = ("score its test set", "evaluate")
    #: How `keras_transformer.runs` reads a stored run of a kind defined
    #: outside the package (`runs.StoredKind`); the built-in kinds' are in
    #: `runs.STORED_KINDS`.
    stored_kind: runs.StoredKind | None = None
    #: Keys of its own section that may change when a run resumes (besides
    #: `config.RESUMABLE_CHANGES`).
    resumable_changes: frozenset[str] = frozenset()
    #: The validation metrics written into TensorBoard's HParams session.
    hparams_metrics: tuple[str, ...] = ("loss",)
    #: The training logs written to TensorBoard every ``train.log_every``.
    summary_names: tuple[str, ...] = ("loss", "token_accuracy", "perplexity")
    #: The ``(section, field)`` of the folder its data is read from (what
    #: ``evaluate --data-dir`` replaces).
    data_folder: tuple[str, str] = ("data", "data_dir")
    #: Whether the kind reads text through a learned tokenizer. Without one
    #: (images) the run folder has no tokenizer and the fingerprint of the
    #: checkpoints is the run id and the model config's hash.
    has_tokenizer = True

    def resolve_sections(self, config: Any) -> None:
        """Resolves the ``model``, ``data`` and ``train`` sections of a
        `TrainConfig` of this kind in place (`config.resolve_text_sections`)."""
        resolve_text_sections(config)

    def model_parts(self, config: Any) -> list[tuple[str, int, str]]:
        """(part, weights, the settings that size it) of the model, for the
        memory check before training (`checks.model_parts`)."""
        return checks.text_model_parts(config, decoder=False)

    def load_data(self, config: Any) -> Any:
        raise NotImplementedError

    def given_data(self, config: Any, data: Any) -> Any:
        """The run's data from what the caller of `train(..., data=...)` gave
        (checked and wrapped as `load_data` returns it)."""
        return data

    def learn_tokenizer(self, config: Any, train_data: Any) -> SubwordTokenizer:
        raise NotImplementedError

    def updates_per_epoch(
        self, config: Any, data: Any, tokenizer: SubwordTokenizer
    ) -> int:
        """Optimizer updates in one pass over the training data."""
        raise NotImplementedError

    def check_schedule(self, config: Any, total_steps: int) -> None:
        """Refuses a learning-rate schedule that does not fit the run's length."""

    def default_updates(self, config: Any, updates_per_epoch: int) -> int:
        """The run's updates when its config sets neither `train.train_steps`
        nor `train.epochs`: one epoch."""
        return updates_per_epoch

    def build_model(self, config: Any, dtype: str | None) -> keras.Model:
        raise NotImplementedError

    def optimizer(self, config: Any, total_steps: int) -> keras.optimizers.Optimizer:
        raise NotImplementedError

    def trainer(self, config: Any, model: keras.Model) -> keras.Model:
        """The `trainer.SummedLossTrainer` that `fit` runs (uncompiled)."""
        raise NotImplementedError

    def training_dataset(
        self, config: Any, data: Any, tokenizer: SubwordTokenizer, skip_updates: int
    ) -> tf.data.Dataset:
        """The endless stream of updates, a function of the seed, after the
        `skip_updates` updates a resumed run has made (so that it sees the
        batches an uninterrupted run would)."""
        raise NotImplementedError

    def validation_dataset(
        self, config: Any, data: Any, tokenizer: SubwordTokenizer
    ) -> tf.data.Dataset:
        raise NotImplementedError

    def update_size(self, config: Any) -> str:
        """What one update holds before accumulation, e.g. ``"4096 tokens"``."""
        raise NotImplementedError

    def training_set(self, config: Any, data: Any) -> str:
        """What the run trains on, e.g. ``"300 dates pairs"``."""
        raise NotImplementedError

    def plan(
        self,
        config: Any,
        strategy: tf.distribute.Strategy,
        data: Any,
        tokenizer: SubwordTokenizer,
        schedule: tuple[int, int],
    ) -> str:
        """The one line that says what the run will do."""
        total_steps, per_epoch = schedule
        count, unit = self.update_size(config).split(" ", 1)
        vocabulary = (
            "" if tokenizer is None else f"; vocabulary {tokenizer.vocabulary_size}"
        )
        return (
            f"Training {total_steps} updates ({per_epoch} per epoch, {count} x "
            f"{config.train.gradient_accumulation} {unit} per update, "
            f"{strategy.num_replicas_in_sync} replica(s)) on "
            f"{self.training_set(config, data)}{vocabulary}."
        )

    def validation(self, run: RunContext) -> keras.callbacks.Callback | None:
        """The chief's validation callback (keeps the best weights), or None."""
        return None

    def best_validation_score(self, validation: Any) -> float | None:
        return None

    def chief_callbacks(
        self, run: RunContext, validation: Any
    ) -> list[keras.callbacks.Callback]:
        """More callbacks only the chief runs (e.g. attention images)."""
        return []

    def evaluate(self, run: RunContext, steps: int) -> Any:
        """The final evaluation on the test split (chief only); an object
        with ``to_dict(n)`` and ``summary()``."""
        raise NotImplementedError

    def evaluate_saved(
        self, model: keras.Model, tokenizer: SubwordTokenizer | None, config: Any
    ) -> Any:
        """The evaluation of a stored run's `model` on its test split
        (``keras-transformer evaluate``; see `evaluate_run`)."""
        raise NotImplementedError

    def weights_to_evaluate(self, run: RunContext) -> keras.Model:
        """The model with the weights ``train.evaluate_with`` names (the
        last, the best or the average of the kept checkpoints, §6.1)."""
        from keras_transformer.training import checkpoints

        return checkpoints.weights_to_evaluate(
            run.config,
            run.root,
            run.model,
            run.say,
            build=lambda: self.build_model(run.config, None),
        )

    @staticmethod
    def log_test_value(run: RunContext, steps: int, name: str, value: float) -> None:
        """Writes the final evaluation's `value` into TensorBoard's ``test`` run."""
        writer = tf.summary.create_file_writer(str(run.log_dir / "test"))
        with writer.as_default(step=steps):
            tf.summary.scalar(name, value)
        writer.close()


def stored_run(
    workdir: str | Path, max_examples: int | None = None, data_dir: str | None = None
) -> tuple[runs.RunFolder, Any]:
    """(a run folder, its stored `TrainConfig`) for ``evaluate``: with
    ``train.test_samples=max_examples`` and, when given, `data_dir` as the
    folder of its data (the recipe's `Recipe.data_folder`)."""
    folder = runs.RunFolder(workdir).check()
    config = TrainConfig.load(folder.config_file)
    changes: dict[str, Any] = {}
    section, field = recipe_for(config).data_folder
    if data_dir is not None:
        # The folder is in the `data` section or in the kind's own.
        name = "options" if section == config.kind else section
        changes[name] = dataclasses.replace(getattr(config, name), **{field: data_dir})
    if max_examples is not None:
        changes["train"] = dataclasses.replace(config.train, test_samples=max_examples)
    return folder, config.replace(**changes) if changes else config


def evaluate_run(
    workdir: str | Path,
    weights: str = "last",
    *,
    data_dir: str | None = None,
    max_examples: int | None = None,
) -> Any:
    """The test evaluation of a stored run's `weights` (``evaluate``): the
    accuracy of a classification run, the bits/dim of an image run.

    Args:
        workdir: the run folder.
        weights: ``"last"``, ``"best"``, ``"average"`` or a weights file
            (see `runs.RunFolder.restore`).
        data_dir: the folder of the data (default: the run's).
        max_examples: evaluate a sample of this many test examples (a
            seeded one of the reviews, the first images).
    """
    folder, config = stored_run(workdir, max_examples, data_dir)
    model, tokenizer = folder.load(weights)
    return recipe_for(config).evaluate_saved(model, tokenizer, config)
