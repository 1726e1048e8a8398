"""`train()`: a complete, resumable training run of the paper's recipe (§5).

The run lives in a work directory (see `kt.training.checkpoints` for its
layout). Starting `train()` again on the same directory with the same
config resumes from the newest checkpoint: same weights, optimizer moments,
step and learning rate, and the data stream continues where the checkpoint
left it (the stream is a function of the seed, and the updates already made
are skipped).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf

from keras_transformer import runs
from keras_transformer.data import SubwordTokenizer
from keras_transformer.export.formats import check_output_placement
from keras_transformer.files import FolderLock, write_atomically
from keras_transformer.progress import is_terminal
from keras_transformer.training import checkpoints as ckpt
from keras_transformer.training.callbacks import (
    NaNGuard,
    StopAtStep,
    TrainingSummaries,
    has_diverged,
    write_hparams,
    write_skipped_pairs,
)
from keras_transformer.training.checkpoints import ConfigMismatchError
from keras_transformer.training.checks import check_before_training, planned_updates
from keras_transformer.training.config import TrainConfig
from keras_transformer.training.data_record import check_data_content, data_content
from keras_transformer.training.distribute import (
    broadcast_from_chief,
    is_chief,
    make_strategy,
    worker_index,
)
from keras_transformer.training.epoch_end import (
    CheckpointCallback,
    fit_epochs,
    validate_pending_epoch,
)
from keras_transformer.training.kinds import recipe_for
from keras_transformer.training.preemption import PreemptionCheckpoint
from keras_transformer.training.progress_logger import PlainProgressLogger
from keras_transformer.training.recipes import RunContext
from keras_transformer.validation import check_path

__all__ = [
    "ConfigMismatchError",
    "TrainResult",
    "TrainingDivergedError",
    "train",
]

logger = logging.getLogger(__name__)


class TrainingDivergedError(RuntimeError):
    """The training loss became NaN or infinite."""


@dataclasses.dataclass
class TrainResult:
    """What a run produced.

    Attributes:
        workdir: this process's work directory (a worker's own folder on
            non-chief workers of a multi-worker run).
        log_dir: TensorBoard logs (``tensorboard --logdir <log_dir>``).
        checkpoint_dir: the kept checkpoints.
        initial_step: the step the run started (or resumed) from.
        steps: optimizer updates done in total (`optimizer.iterations`).
        learning_rate: the learning rate of the next update (Eq. 7).
        history: Keras' per-epoch logs of this call (loss, token_accuracy,
            perplexity, val_* and val_bleu/val_chrf/val_exact_match).
        best_validation_score: the best validation score the kind keeps its best
            weights by (`Recipe.best_validation_score`: BLEU for translation,
            accuracy for classification, bits/dim for images), if any.
        evaluation: the final evaluation of the test split (chief only):
            for translation the greedy translation of the test pairs, with
            sacreBLEU, chrF and their signatures; for classification the
            test accuracy (`classification.ClassificationEvaluation`).
        weights_checksum: a checksum of the final weights.
        model: the trained model (`build_transformer` for translation,
            `build_classifier` for classification).
        tokenizer: its tokenizer.
        skipped_pairs: what reading the data dropped (bad lines, see
            `data.on_bad_line`), per split: its files, the pairs kept and
            the pairs skipped by reason (`TaskData.skipped`).
        preempted: whether SIGTERM or SIGINT stopped the run early (see
            `PreemptionCheckpoint`): a checkpoint of step `steps` was
            saved, there was no final evaluation and no ``result.json``;
            calling `train` again resumes the run.
    """

    workdir: Path
    log_dir: Path
    checkpoint_dir: Path
    initial_step: int
    steps: int
    learning_rate: float
    history: dict[str, list[float]]
    best_validation_score: float | None
    evaluation: Any
    weights_checksum: str
    model: keras.Model = dataclasses.field(repr=False)
    tokenizer: SubwordTokenizer | None = dataclasses.field(repr=False)
    skipped_pairs: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    preempted: bool = False

    def save(self, path: Path, num_translations: int = 5) -> None:
        """Writes `to_dict` as JSON (``result.json``), atomically."""
        write_atomically(
            path, json.dumps(self.to_dict(num_translations), indent=2) + "\n"
        )

    def to_dict(self, num_translations: int = 5) -> dict[str, Any]:
        return {
            "workdir": str(self.workdir),
            "log_dir": str(self.log_dir),
            "checkpoint_dir": str(self.checkpoint_dir),
            "initial_step": self.initial_step,
            "steps": self.steps,
            "learning_rate": self.learning_rate,
            "history": self.history,
            "best_validation_score": self.best_validation_score,
            "evaluation": (
                self.evaluation.to_dict(num_translations) if self.evaluation else None
            ),
            "weights_checksum": self.weights_checksum,
            "skipped_pairs": self.skipped_pairs,
            "preempted": self.preempted,
        }


# ----------------------------------------------------------------- the steps
def _directories(root: Path, strategy: tf.distribute.Strategy) -> tuple[Path, Path]:
    """(this process's folder, the TensorBoard folder): the chief writes into
    the run folder, every other worker into ``workers/worker_<i>/``."""
    chief = is_chief(strategy)
    workers = root / runs.WORKERS_DIR
    directory = root if chief else workers / f"worker_{worker_index(strategy)}"
    directory.mkdir(parents=True, exist_ok=True)
    return directory, root / runs.LOG_DIR


def _tokenizer(
    config: TrainConfig,
    directory: Path,
    train_pairs: Any,
    strategy: tf.distribute.Strategy,
    say: Callable[[str], None],
) -> SubwordTokenizer:
    """The run's tokenizer: loaded, or learned and saved on a fresh run.

    Under `MultiWorkerMirroredStrategy` only the chief loads or learns it; the
    other workers receive its bytes from the chief through a collective (the
    workers need not share a file system) and save them in their folders.
    """
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return _load_or_learn_tokenizer(config, directory, train_pairs, say)
    chief = is_chief(strategy)
    tokenizer, failure = None, None
    if chief:
        try:
            tokenizer = _load_or_learn_tokenizer(config, directory, train_pairs, say)
        except Exception as e:  # re-raised after the broadcast
            failure = e  # the other workers wait for the bytes: send none
    proto = broadcast_from_chief(strategy, tokenizer.model_proto if tokenizer else b"")
    if failure is not None:
        raise failure
    if tokenizer is not None:
        return tokenizer
    if not proto:
        # A ValueError like the chief's (config, data or files): one line.
        raise ValueError(
            "The chief worker could not load or learn the tokenizer, so this "
            "worker stops too; the chief's output says why."
        )
    tokenizer = SubwordTokenizer.from_proto(proto)
    say(f"Received the tokenizer {tokenizer.fingerprint[:12]} from the chief.")
    ckpt.check_tokenizer(directory / ckpt.CHECKPOINT_DIR, tokenizer)
    ckpt.check_vocabulary_size(config, tokenizer)
    folder = directory / ckpt.TOKENIZER_DIR
    if not _holds_tokenizer(folder, tokenizer):
        tokenizer.save(folder)
    return tokenizer


def _load_or_learn_tokenizer(
    config: TrainConfig,
    directory: Path,
    train_pairs: Any,
    say: Callable[[str], None],
) -> SubwordTokenizer:
    """Loads ``<directory>/tokenizer``, or learns and saves it on a fresh run.

    A ``tokenizer.model`` without ``tokenizer.json`` is what a save that
    stopped half way left (before saves were atomic): relearned, with a
    warning, while the run has no checkpoint; otherwise `load` refuses it.
    """
    folder = directory / ckpt.TOKENIZER_DIR
    model, marker = folder / "tokenizer.model", folder / "tokenizer.json"
    resumed = bool(ckpt.checkpoint_paths(directory / ckpt.CHECKPOINT_DIR))
    if marker.is_file() or (model.is_file() and resumed):
        tokenizer = SubwordTokenizer.load(folder)
    else:
        if model.is_file():
            logger.warning(
                "%s holds an incomplete tokenizer (tokenizer.model without "
                "tokenizer.json: a save stopped half way, e.g. on a full disk); "
                "the run has no checkpoint yet, so it is learned again.",
                folder,
            )
        say(f"Learning the tokenizer ({config.data.vocabulary_size} pieces).")
        tokenizer = recipe_for(config).learn_tokenizer(config, train_pairs)
        tokenizer.save(folder)
    ckpt.check_tokenizer(directory / ckpt.CHECKPOINT_DIR, tokenizer)
    ckpt.check_vocabulary_size(config, tokenizer)
    return tokenizer


def _holds_tokenizer(folder: Path, tokenizer: SubwordTokenizer) -> bool:
    """Whether `folder` already holds exactly `tokenizer` (complete)."""
    try:
        return SubwordTokenizer.load(folder).fingerprint == tokenizer.fingerprint
    except (OSError, ValueError):
        return False


def _check_same_on_all_workers(strategy: tf.distribute.Strategy, text: str) -> None:
    """Refuses to train when workers run different configs, data or tokenizers."""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return
    digest = float(int(hashlib.sha256(text.encode()).hexdigest()[:6], 16))

    @tf.function
    def sums() -> Any:
        values = strategy.run(lambda: tf.constant([digest, digest**2], tf.float64))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, values, axis=None)

    total, squares = (float(v) for v in sums().numpy())
    workers = strategy.num_replicas_in_sync
    # All values are equal exactly when n * sum(v^2) == sum(v)^2.
    if workers * squares != total**2:
        raise ValueError(
            "The workers disagree on the config, the data or the tokenizer. "
            "Start every worker with the same command, config and data (and, "
            "when resuming, the same work directory contents)."
        )


# ----------------------------------------------------------------- building
def _build(
    config: TrainConfig, strategy: tf.distribute.Strategy, total_steps: int = 0
) -> tuple[keras.Model, keras.Model, Any]:
    """(model, trainer, optimizer) of the run's recipe, built in `strategy`'s
    scope with the run's precision (a loss-scaled optimizer for float16)."""
    recipe = recipe_for(config)
    precision = config.train.precision
    with strategy.scope():
        model = recipe.build_model(
            config, dtype=None if precision == "float32" else precision
        )
        optimizer = recipe.optimizer(config, total_steps)
        if precision == "mixed_float16":
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        trainer = recipe.trainer(config, model)
        trainer.compile(optimizer=optimizer, jit_compile=config.train.jit_compile)
        optimizer.build(model.trainable_variables)
    return model, trainer, optimizer


def _steps(
    config: TrainConfig, data: Any, tokenizer: SubwordTokenizer
) -> tuple[int, int]:
    """(total updates, updates per epoch).

    Raises:
        ValueError: when the recipe's learning-rate schedule does not fit
            the run (translation: a warm-up of Eq. 7 longer than the run).
    """
    train_config = config.train
    recipe = recipe_for(config)
    per_epoch = train_config.steps_per_epoch
    if per_epoch is None:
        per_epoch = recipe.updates_per_epoch(config, data, tokenizer)
    total = planned_updates(config, per_epoch)
    recipe.check_schedule(config, total)
    return total, min(per_epoch, total)


def _checkpoints(
    config: TrainConfig,
    checkpoint_dir: Path,
    tokenizer: SubwordTokenizer | None,
    model: keras.Model,
    optimizer: Any,
    say: Callable[[str], None],
    force: bool = False,
) -> tuple[runs.RunFingerprint, Any, int]:
    """(the run's fingerprint, its checkpoint manager, the step it resumes
    from), with the newest intact checkpoint restored; one of another run is
    refused. With `force`, a run whose checkpoints are all damaged starts
    from step 0 instead of being refused."""
    fingerprint = ckpt.write_checkpoint_metadata(
        checkpoint_dir, tokenizer, config.model
    )
    manager = ckpt.resume_checkpoints(
        checkpoint_dir,
        model,
        optimizer,
        config.train.keep_checkpoints,
        fingerprint=fingerprint,
        # A checkpoint folder deleted during the run gets the same metadata.
        on_new_folder=lambda: ckpt.write_checkpoint_metadata(
            checkpoint_dir, tokenizer, config.model, run_id=fingerprint.run_id
        ),
        force=force,
    )
    initial_step = int(optimizer.iterations.numpy())
    if initial_step:
        latest = manager.latest_checkpoint
        say(f"Resuming {checkpoint_dir.parent} from step {initial_step} ({latest}).")
    return fingerprint, manager, initial_step


# --------------------------------------------------------------------- train
def train(
    config: TrainConfig,
    workdir: str | os.PathLike[str],
    strategy: tf.distribute.Strategy | str | None = None,
    *,
    force: bool = False,
    callbacks: Sequence[keras.callbacks.Callback] = (),
    printer: Callable[[str], None] | None = print,
    data: Any = None,
) -> TrainResult:
    """Trains a model of the config's kind; resumes an interrupted run.

    The recipe is the paper's unless the config says otherwise: token-budget
    batches of similar lengths (§5.1), Adam with beta_1=0.9, beta_2=0.98,
    epsilon=1e-9 and the learning rate of Eq. 7 with 4000 warm-up steps
    (§5.3), dropout 0.1 and label smoothing 0.1 (§5.4). Every epoch ends with
    a checkpoint; every `train.validation_every` epochs with validation loss,
    greedy-decoding BLEU on a validation sample and attention maps, all in
    TensorBoard. At the end the test pairs are translated greedily and scored
    with sacreBLEU and chrF.

    Args:
        config: the run's settings.
        workdir: the work directory: config, tokenizer, checkpoints, logs.
            Reusing it with the same config resumes the run.
        strategy: a `tf.distribute.Strategy`, or ``"default"``,
            ``"mirrored"``, ``"multiworker"`` (see `make_strategy`);
            ``None`` means ``"default"``.
        force: continue a run whose stored config or data files differ;
            start again from step 0 when every checkpoint is damaged.
        callbacks: extra Keras callbacks.
        printer: where progress messages go (``None`` for silence).
        data: the run's data instead of what the config names (the image
            kind: an `ImageData`), checked by the recipe.

    Returns:
        A `TrainResult`.

    Raises:
        ValueError: before `workdir` is touched, when the config alone
            shows that the run cannot go well (`check_before_training`: a
            warm-up longer than the run, a model too large for memory).
        ConfigMismatchError: when `workdir` holds a run with another config,
            or trained on other data files (unless `force`).
        ValueError: when the tokenizer does not match the checkpoints.
        TrainingDivergedError: when the loss becomes NaN or infinite.
        CheckpointDamagedError: when every checkpoint of the run is damaged
            (damaged ones are moved aside and the newest intact one resumed;
            with `force` it starts from step 0).
        CheckpointWriteError: when a checkpoint cannot be written (full
            disk); the previous one stays intact and the latest.
        TypeError: when `workdir` is not a path, `printer` not a function or
            `callbacks` not Keras callbacks (before anything is written).
        NotADirectoryError: when `workdir` is a file.
        ValueError: when `workdir` holds files but no run (an export folder,
            a run's checkpoints folder, someone's files), or lies in an
            export folder or one of a run's own folders.
        FolderLockedError: when another process writes `workdir` (a second
            `train`, `average-checkpoints`, ...); its PID and host are named.
        ForeignCheckpointError: when the newest checkpoint in `workdir`
            belongs to another run (copied in from elsewhere).
        FileWriteError: when a file of the run cannot be written (full
            disk); the previous version of the file is intact.
    """
    if not isinstance(config, TrainConfig):
        raise TypeError(
            f"`config` must be a TrainConfig. Received: {type(config).__name__}; "
            "read a file with TrainConfig.load(path), or use TrainConfig.from_dict."
        )
    callbacks = _checked_train_arguments(workdir, callbacks, printer)
    # What the config alone tells (a warm-up longer than the run, a model
    # that cannot fit in memory) is refused before the run folder is made.
    check_before_training(config)
    strategy = make_strategy(strategy or "default") if _named(strategy) else strategy
    # RunFolder refuses a workdir that is a file (NotADirectoryError), and
    # one that holds files but no run; one inside an export (which the next
    # `export --overwrite` deletes whole) or a run's own folders is refused.
    check_output_placement(workdir, "workdir")
    root = runs.RunFolder(workdir).check_trainable().path
    directory, log_dir = _directories(root, strategy)
    # One writer per run folder: a second `train` (or `average-checkpoints`,
    # `evaluate`'s outputs) on it is refused, naming this process.
    with FolderLock(directory, "keras-transformer train"):
        return _train(
            config,
            strategy,
            (root, directory, log_dir),
            force,
            callbacks,
            printer,
            data,
        )


def _checked_train_arguments(
    workdir: Any, callbacks: Any, printer: Any
) -> list[keras.callbacks.Callback]:
    """`train`'s other arguments, checked before the run folder is made (a
    wrong `printer` failed after it had written ``config.json``); returns
    the callbacks as a list."""
    check_path("`workdir`", workdir)
    if printer is not None and not callable(printer):
        raise TypeError(
            "`printer` must be a function of one line (such as print), or None "
            f"for silence. Received: {printer!r}"
        )
    is_callback = keras.callbacks.Callback
    single = isinstance(callbacks, (str, bytes, is_callback))
    if single or not hasattr(callbacks, "__iter__"):
        wrong = [callbacks]
    else:
        callbacks = list(callbacks)
        wrong = [c for c in callbacks if not isinstance(c, is_callback)]
    if wrong:
        wrap = isinstance(callbacks, is_callback)
        raise TypeError(
            "`callbacks` must be a list of keras.callbacks.Callback instances"
            + ("; wrap one callback in a list" if wrap else "")
            + f". Received: {wrong[0]!r}"
        )
    return callbacks


def _train(
    config: TrainConfig,
    strategy: tf.distribute.Strategy,
    folders: tuple[Path, Path, Path],
    force: bool,
    callbacks: Sequence[keras.callbacks.Callback],
    printer: Callable[[str], None] | None,
    given_data: Any = None,
) -> TrainResult:
    """`train` in a locked run folder (`folders`: the run folder, this
    process's folder, the TensorBoard folder)."""
    root, directory, log_dir = folders
    say = printer or _silent
    chief = is_chief(strategy)
    recipe = recipe_for(config)
    checkpoint_dir = directory / ckpt.CHECKPOINT_DIR
    with ckpt.unchanged_when_refused(directory):
        ckpt.prepare_run_config(config, directory, force)
        # Data and the tokenizer (learned once, then reloaded on every restart).
        keras.utils.set_random_seed(config.train.seed)
        data, tokenizer = _data_and_tokenizer(
            config, directory, strategy, say, given_data, force
        )
        schedule = _steps(config, data, tokenizer)
        # The model, resumed from the newest intact checkpoint (of this run).
        model, trainer, optimizer = _build(config, strategy, schedule[0])
        fingerprint, manager, initial_step = _checkpoints(
            config, checkpoint_dir, tokenizer, model, optimizer, say, force
        )
    say(recipe.plan(config, strategy, data, tokenizer, schedule))
    if initial_step >= schedule[0]:
        say(
            f"The run has made {initial_step} updates, "
            f"{'all' if initial_step == schedule[0] else 'more than'} the "
            f"{schedule[0]} planned: nothing is left to train, so its weights are "
            "evaluated as they are (raise train.train_steps or train.epochs to "
            "train on)."
        )
    run = RunContext(
        config, root, log_dir, model, tokenizer, data, fingerprint, initial_step, say
    )

    # Training; checkpoints, validation, summaries, preemption are callbacks.
    validation = recipe.validation(run) if chief else None
    nan_guard = NaNGuard()
    preemption = PreemptionCheckpoint(manager, nan_guard)
    validators = _chief_callbacks(run, validation) if chief else []
    # After the validators: its record says when their epoch-end work is done.
    record = root / runs.VALIDATION_RECORD if chief else None
    checkpoints = CheckpointCallback(manager, nan_guard, record)
    run_callbacks = [nan_guard, StopAtStep(schedule[0]), *validators, checkpoints]
    verbose, progress = _progress(config, say if printer else None, schedule[0])
    run_callbacks += [*callbacks, *progress, preemption]  # last: the others have run
    # A run stopped during an epoch's validation resumes from the epoch's
    # checkpoint (saved before it) and validates it first.
    validation_data = functools.cache(
        lambda: recipe.validation_dataset(config, data, tokenizer)
    )  # built once, for both
    validate_pending_epoch(
        trainer,
        initial_step,
        record,
        validators,
        validation_data,
        config.train.validation_every,
        say,
    )
    history = fit_epochs(
        config,
        trainer,
        data,
        tokenizer,
        run_callbacks,
        initial_step,
        schedule,
        verbose,
        validation_data=validation_data,
    )
    if has_diverged(nan_guard):
        raise _diverged(nan_guard, manager.latest_checkpoint)

    # The final evaluation (chief only) and the results; none after a preemption.
    steps = int(optimizer.iterations.numpy())
    evaluation = None
    if preemption.requested is not None:
        say(preemption.resume_message())
    elif chief:
        evaluation = recipe.evaluate(run, steps)
    result = TrainResult(
        workdir=directory,
        log_dir=log_dir,
        checkpoint_dir=checkpoint_dir,
        initial_step=initial_step,
        steps=steps,
        learning_rate=float(keras.ops.convert_to_numpy(optimizer.learning_rate)),
        history=history,
        best_validation_score=recipe.best_validation_score(validation),
        evaluation=evaluation,
        weights_checksum=ckpt.weights_checksum(model),
        model=model,
        tokenizer=tokenizer,
        skipped_pairs=data.skipped(),
        preempted=preemption.requested is not None,
    )
    if not result.preempted:
        result.save(directory / runs.RESULT_FILE, config.train.num_translations)
        if chief:
            say(f"TensorBoard logs: {log_dir}  (tensorboard --logdir {log_dir})")
    return result


# -------------------------------------------------------------- train's parts
def _data_and_tokenizer(
    config: TrainConfig,
    directory: Path,
    strategy: tf.distribute.Strategy,
    say: Callable[[str], None],
    given_data: Any = None,
    force: bool = False,
) -> tuple[Any, SubwordTokenizer | None]:
    """(the recipe's data, the run's tokenizer or None for a kind without
    one). The data are those of the run's first start (`check_data_content`;
    `force`: continue on other data), and the workers are checked to run the
    same config, data and tokenizer."""
    recipe = recipe_for(config)
    if given_data is None:
        data = recipe.load_data(config)
    else:
        data = recipe.given_data(config, given_data)
    for line in data.skip_messages():  # bad lines: said once, never dropped silently
        if say is _silent:
            logger.warning("%s", line)
        else:
            say(line)
    content = data_content(data)
    data_dir = getattr(config.data, "data_dir", None)
    source = "its data" + (f" (data.data_dir {data_dir})" if data_dir else "")
    try:
        check_data_content(content, directory, force, source)
    except ValueError as e:
        raise ConfigMismatchError(str(e)) from None
    tokenizer = None
    if recipe.has_tokenizer:
        tokenizer = _tokenizer(config, directory, data.train, strategy, say)
    fingerprint = tokenizer.fingerprint if tokenizer else ""
    everything = config.to_json() + fingerprint + json.dumps(content, sort_keys=True)
    _check_same_on_all_workers(strategy, everything)
    return data, tokenizer


def _named(strategy: tf.distribute.Strategy | str | None) -> bool:
    """Whether `strategy` is a name for `make_strategy` (or None: the default)."""
    return strategy is None or isinstance(strategy, str)


def _silent(_: str) -> None:
    """The printer of a run given none (``printer=None``)."""


def _chief_callbacks(
    run: RunContext, validation: keras.callbacks.Callback | None
) -> list[keras.callbacks.Callback]:
    """What only the chief does: validation, the recipe's own, TensorBoard.

    A new run also writes its hyperparameters (HParams) and what reading the
    data skipped (TensorBoard text) once, at step 0.
    """
    recipe = recipe_for(run.config)
    found = [] if validation is None else [validation]
    found += recipe.chief_callbacks(run, validation)
    # The one writer of the training and validation scalars (no
    # keras.callbacks.TensorBoard: its epoch_* copies showed everything twice).
    found.append(
        TrainingSummaries(
            run.log_dir, run.config.train.log_every, names=recipe.summary_names
        )
    )
    if run.initial_step == 0:
        write_skipped_pairs(run.log_dir, run.data.skipped(), step=0)
        # The HParams session is the validation run, where its metrics are.
        write_hparams(
            run.log_dir,
            run.config.flat(),
            trial_id=run.root.resolve().name,
            metrics=[(name, "validation") for name in recipe.hparams_metrics],
            session="validation",
        )
    return found


def _progress(
    config: TrainConfig,
    printer: Callable[[str], None] | None,
    total_steps: int,
    stream: Any = None,
) -> tuple[int, list[keras.callbacks.Callback]]:
    """(`fit`'s verbose, progress callbacks): the run's progress with its ETA.

    On a terminal (standard output, or `stream`) with ``train.verbose=1``, a
    `PlainProgressLogger` redraws one line in place: updates done of
    `total_steps` with a bar, updates per second and the time left, and
    prints one line per epoch through `printer` (``verbose=2``: Keras' line
    per epoch). When the output is not a terminal (a cluster job, CI, a
    redirect to a file) carriage returns would make one endless line: `fit`
    is then silent and a `PlainProgressLogger` prints one plain line every
    `train.log_every` updates, with the time left (and one per epoch).
    ``train.verbose=0`` stays silent either way.
    """
    verbose = config.train.verbose
    stream = sys.stdout if stream is None else stream
    terminal = is_terminal(stream)
    if verbose == 0 or (terminal and (verbose != 1 or printer is None)):
        return verbose, []
    if printer is None:
        return 0, []
    logger = PlainProgressLogger(
        config.train.log_every, total_steps, printer, terminal=terminal, stream=stream
    )
    return 0, [logger]


def _diverged(nan_guard: NaNGuard, latest: str | None) -> TrainingDivergedError:
    return TrainingDivergedError(
        f"Training stopped: the loss became {nan_guard.bad_loss} at step "
        f"{nan_guard.bad_step}. The last good checkpoint is "
        f"{latest or 'none (no checkpoint was written)'}. Lower the learning "
        "rate (model.optimizer.learning_rate_scale), lengthen the warm-up "
        "(model.optimizer.warmup_steps), clip gradients "
        "(model.optimizer.clipnorm=1.0), or train in float32 or "
        "mixed_bfloat16 instead of mixed_float16; then restart with --force "
        "(or from a new work directory)."
    )
