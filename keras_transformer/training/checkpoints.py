"""Checkpoints of a run, their averaging (§6.1), and loading a trained model.

A run's work directory holds:

```text
config.json           the resolved TrainConfig
tokenizer/            the shared SubwordTokenizer (tokenizer.model/.json)
checkpoints/          tf.train checkpoints ckpt-<step> (model + optimizer,
                      so the step and the learning rate resume exactly),
                      the last `train.keep_checkpoints` of them, and
                      checkpoints.json (the tokenizer they were trained with)
best.weights.h5       the weights with the best validation BLEU
averaged.weights.h5   written by `average_checkpoints`
logs/                 TensorBoard logs
result.json           the final scores
```
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.data import SubwordTokenizer
from keras_transformer.files import FolderLock, write_atomically
from keras_transformer.models import build_transformer
from keras_transformer.runs import (
    AVERAGED_WEIGHTS,
    BEST_WEIGHTS,
    CHECKPOINT_DIR,
    CONFIG_FILE,
    TOKENIZER_DIR,
    CheckpointDamagedError,
    CheckpointManager,
    CheckpointMismatchError,
    CheckpointRemovedError,
    CheckpointWriteError,
    ForeignCheckpointError,
    RunFingerprint,
    RunFolder,
    check_fingerprint,
    check_tokenizer,
    checkpoint_fingerprint,
    checkpoint_paths,
    checkpoint_problem,
    checkpoint_step,
    enclosing_run,
    record_checkpoints_on_disk,
    restore_checkpoint,
    restore_newest_checkpoint,
    run_fingerprint,
    save_checkpoint,
    save_weights,
    write_checkpoint_metadata,
)
from keras_transformer.runs import (
    BEST_INFO as BEST_INFO,  # re-exported (see `keras_transformer.runs`)
)
from keras_transformer.runs.checkpoint_io import (
    READ_ATTEMPTS,
    assert_every_weight_restored,
    restore_or_explain,
)
from keras_transformer.runs.checkpoints import damaged_files
from keras_transformer.runs.fingerprints import changed_model_settings
from keras_transformer.runs.fingerprints import (
    fingerprint_variable as runs_fingerprint_variable,
)
from keras_transformer.runs.layout import CHECKPOINT_METADATA, DATA_RECORD, RUN_ENTRIES
from keras_transformer.runs.weights import weights_info_file
from keras_transformer.training.config import (
    RESUMABLE_CHANGES,
    TrainConfig,
    config_differences,
)
from keras_transformer.training.data_record import check_data_files
from keras_transformer.training.kinds import recipe_for
from keras_transformer.validation import check_path, check_positive_int, count_of

# The run-folder names (`CHECKPOINT_DIR`, `CONFIG_FILE`, ...) are defined and
# listed in `keras_transformer.runs`; they stay importable from here.
__all__ = [
    "CheckpointDamagedError",
    "CheckpointWriteError",
    "ConfigMismatchError",
    "average_checkpoints",
    "checkpoint_paths",
    "checkpoint_step",
    "check_tokenizer",
    "check_vocabulary_size",
    "load_trained_model",
    "mean_of_weights",
    "prepare_run_config",
    "resume_checkpoints",
    "save_checkpoint",
    "weights_checksum",
    "weights_to_evaluate",
    "write_checkpoint_metadata",
]

logger = logging.getLogger(__name__)

# The layout of a run folder and the checkpoint helpers live in
# `keras_transformer.runs`; they stay importable from here.
_METADATA = CHECKPOINT_METADATA


def weights_checksum(model: keras.Model) -> str:
    """A short, order-sensitive checksum of all weights (to compare replicas)."""
    import hashlib

    digest = hashlib.sha256()
    for weight in model.weights:
        digest.update(
            np.ascontiguousarray(keras.ops.convert_to_numpy(weight)).tobytes()
        )
    return digest.hexdigest()[:16]


_restore_model = restore_checkpoint


class ConfigMismatchError(ValueError):
    """A run was restarted in a work directory with a different config, or
    on changed data files (`check_data_files`)."""


# ------------------------------------------------------------ resume policy
@contextlib.contextmanager
def unchanged_when_refused(directory: Path) -> Iterator[None]:
    """Puts the run's ``config.json``, ``checkpoints.json`` and ``data.json``
    back as they were when the block is refused at the run's checkpoints
    (another run's, none carrying a fingerprint, all damaged, of other
    sizes) or, once the run has checkpoints, fails at anything else (its
    data, its tokenizer, the model of new settings): a refused `train`
    leaves the run as it found it, and a resume with settings that fail
    does not become the run's settings."""
    records = [directory / CONFIG_FILE, directory / CHECKPOINT_DIR / _METADATA]
    records.append(directory / DATA_RECORD)
    kept = {path: path.read_bytes() if path.is_file() else None for path in records}
    resumed = bool(checkpoint_paths(directory / CHECKPOINT_DIR))
    refusals = (
        CheckpointDamagedError,
        CheckpointMismatchError,
        CheckpointRemovedError,
        ForeignCheckpointError,
    )
    try:
        yield
    except BaseException as error:  # a Ctrl-C too: the settings never ran
        if not (resumed or isinstance(error, refusals)):
            raise
        for path, content in kept.items():
            with contextlib.suppress(OSError):  # the refusal is what to report
                if content is None:
                    path.unlink(missing_ok=True)
                else:
                    write_atomically(path, content)
        raise


def _check_trained_model_settings(
    config: TrainConfig, directory: Path, changes: dict[str, Any], force: bool
) -> None:
    """Refuses (unless `force`) to resume with model settings other than
    those the checkpoints were trained with (``checkpoints.json``) that the
    comparison with ``config.json`` did not show: a ``config.json`` edited
    after training. One of them that keeps every weight's shape
    (``num_heads``) would resume without a word, and the record with it."""
    edited = changed_model_settings(
        directory / CHECKPOINT_DIR,
        config.model.to_dict(),
        ignore=[k.removeprefix("model.") for k in changes if k.startswith("model.")],
    )
    if not edited:
        return
    message = (
        f"{directory / CONFIG_FILE} sets other model settings than the run's "
        f"checkpoints were trained with ({'; '.join(edited)}): it was changed "
        "after training."
    )
    if not force:
        raise ConfigMismatchError(
            f"{message} Restore those settings, or pass --force (force=True) to "
            "continue this run with the new ones."
        )
    logger.warning("%s Continuing with them (--force).", message)


def prepare_run_config(config: TrainConfig, directory: Path, force: bool) -> bool:
    """Writes config.json, or checks it against the stored one.

    A changed config is refused once checkpoints exist (unless `force`),
    except for the `RESUMABLE_CHANGES`; before that nothing was trained, so
    the new config simply replaces the old one, and a tokenizer learned for
    other data settings is discarded. A `config.json` written with old key
    names loads into the same config as the new names, so it is no change.
    A resume on data files whose content changed is refused as well (unless
    `force`; `check_data_files`).

    Returns:
        Whether checkpoints of this run exist (the run resumes).
    """
    path = directory / CONFIG_FILE
    resumed = bool(checkpoint_paths(directory / CHECKPOINT_DIR))
    changes: dict[str, Any] = {}
    if path.is_file():
        try:
            stored = TrainConfig.load(path)
        except ValueError as e:
            if resumed and not force:
                raise ConfigMismatchError(
                    f"{e}. Pass --force (force=True) to overwrite it with the new "
                    "config."
                ) from e
            stored = None
        changes = config_differences(stored, config) if stored else {}
        resumable = RESUMABLE_CHANGES | recipe_for(config).resumable_changes
        blocking = {k: v for k, v in changes.items() if k not in resumable}
        if resumed and stored is not None and stored.kind != config.kind:
            raise ConfigMismatchError(
                f"{directory} holds a {stored.kind} run, and the config is a "
                f"{config.kind} run's (its `kind`): a run keeps its kind, even "
                "with --force. Train the new one in another --workdir."
            )
        precision = changes.get("train.precision")
        if resumed and precision and "mixed_float16" in precision:
            raise ConfigMismatchError(
                f"train.precision {precision[0]!r} -> {precision[1]!r} cannot "
                f"continue the run in {directory}, even with --force: "
                "mixed_float16 trains with a loss-scale optimizer, whose state "
                "the other precisions' checkpoints lack (and the reverse). Keep "
                f"train.precision={precision[0]!r}, or start a new run in another "
                "--workdir."
            )
        if blocking and resumed and not force:
            lines = "\n".join(
                f"  {key}: {old!r} -> {new!r}" for key, (old, new) in blocking.items()
            )
            raise ConfigMismatchError(
                f"{directory} holds a run with a different config; resuming it "
                f"with this one would mix two experiments. Differences (stored -> "
                f"new):\n{lines}\nUse another --workdir for a new run, restart "
                "with the stored config (keras-transformer train "
                f"{path} --workdir {directory}), or pass --force (force=True) to "
                "continue this run with the new config."
            )
        if resumed:
            _check_trained_model_settings(config, directory, changes, force)
        tokenizer_dir = directory / TOKENIZER_DIR
        if (
            not resumed
            and tokenizer_dir.is_dir()
            and (
                stored is None
                or any(k.startswith("data.") or k == "train.seed" for k in changes)
            )
        ):
            shutil.rmtree(tokenizer_dir)
    try:
        check_data_files(config.data, directory, resumed, force)
    except ValueError as e:
        raise ConfigMismatchError(str(e)) from None
    if changes:
        logger.warning(
            "%s %s with changed settings: %s",
            "Resuming" if resumed else "Restarting",
            directory,
            ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in changes.items()),
        )
    config.save(path)
    return resumed


def check_vocabulary_size(config: TrainConfig, tokenizer: SubwordTokenizer) -> None:
    """Refuses a run tokenizer whose size is not `data.vocabulary_size`.

    The tokenizer decides the vocabulary size (§5.1) and the config records
    it (`kt.training.config.reconcile_vocabulary_size`); a stored tokenizer
    of another size belongs to other settings.
    """
    if tokenizer.vocabulary_size != config.data.vocabulary_size:
        raise ValueError(
            f"The run's tokenizer has {tokenizer.vocabulary_size} pieces but the "
            f"config asks for data.vocabulary_size={config.data.vocabulary_size}."
            " Set data.vocabulary_size to the tokenizer's size, or delete the "
            "tokenizer folder of a run that has no checkpoint yet."
        )


def random_streams(model: keras.Model) -> list[Any]:
    """The states of `model`'s random-number streams (its dropout masks'),
    in the model's order of variables (their names are numbered per
    process). Every checkpoint of a run holds them, so that a resumed run
    draws the masks an uninterrupted one would; without them the streams
    start again from their seeds and repeat the first updates' masks."""
    return [v for v in model.variables if v.name == "seed_generator_state"]


def resume_checkpoints(
    checkpoint_dir: Path,
    model: keras.Model,
    optimizer: Any,
    keep: int,
    fingerprint: RunFingerprint | None = None,
    on_new_folder: Callable[[], Any] | None = None,
    force: bool = False,
) -> tf.train.CheckpointManager:
    """The run's checkpoint manager, with the newest intact checkpoint restored.

    A checkpoint holds the weights, the optimizer (its moments and step counter,
    hence the learning rate of Eq. 7) and the dropout streams' states
    (`random_streams`; a checkpoint without them restores the rest), so a
    restart goes on where the checkpoint left off; with no checkpoint yet, the
    run starts from its initialisation. The checkpoints are the files on disk
    and the records of ``checkpoints.json``
    (`keras_transformer.runs.checkpoint_paths`), not TensorFlow's ``checkpoint``
    state file, which is written anew here
    (`keras_transformer.runs.record_checkpoints_on_disk`): a deleted or garbled
    one changes nothing. The last `keep` checkpoints are kept. A damaged
    checkpoint (truncated, empty or missing file) is moved aside as
    ``*.corrupt`` with a warning and the previous one restored
    (`keras_transformer.runs.restore_newest_checkpoint`). Every new checkpoint
    carries `fingerprint`, and one of another run is refused. Call it holding
    the run's lock (it moves damaged files).

    Args:
        force: start from step 0 when every checkpoint is damaged (their
            files stay moved aside) instead of refusing.

    Raises:
        CheckpointDamagedError: when every checkpoint is damaged, or only
            damaged files moved aside earlier remain (the run would start
            from step 0: that is left to the user, who moves them away or
            passes `force`).
        ForeignCheckpointError: when the newest intact checkpoint is another
            run's (copied in from another work directory).
        CheckpointMismatchError: when it does not fit the model.
    """
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    streams = random_streams(model)
    config_file = checkpoint_dir.parent / CONFIG_FILE

    def restore(prefix: str) -> None:
        def restore_all() -> None:
            assert_every_weight_restored(checkpoint.restore(prefix))
            streams_only = tf.train.Checkpoint(random_streams=streams)
            streams_only.restore(prefix).expect_partial()  # none in older ones

        restore_or_explain(restore_all, prefix, str(config_file), forced=force)

    try:
        restored = restore_newest_checkpoint(
            checkpoint_dir, restore, fingerprint, move_damaged=True
        )
    except CheckpointDamagedError:
        if not force:
            raise
        restored = None
    if restored is None and damaged_files(checkpoint_dir):
        names = ", ".join(p.name for p in damaged_files(checkpoint_dir)[:4])
        if not force:
            raise CheckpointDamagedError(
                f"{checkpoint_dir} holds no intact checkpoint, only damaged files "
                f"moved aside earlier ({names}): training would start again from "
                "step 0. Restore the checkpoints from a backup, or move the "
                f"*.corrupt files out of {checkpoint_dir} (or pass --force) to "
                "start from step 0."
            )
        logger.warning(
            "%s holds no intact checkpoint, only damaged files (%s, kept aside): "
            "starting again from step 0 (--force).",
            checkpoint_dir,
            names,
        )
    # The records and TensorFlow's state file list what is on disk.
    record_checkpoints_on_disk(
        checkpoint_dir, fingerprint, verified=(restored,) if restored else ()
    )
    # The saved checkpoint carries the streams and the fingerprint; restoring
    # needs only the model and the optimizer, so older checkpoints still load.
    saved: dict[str, Any] = {"random_streams": streams}
    if fingerprint is not None:
        saved["fingerprint"] = runs_fingerprint_variable(fingerprint)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, **saved)
    return CheckpointManager(
        checkpoint, str(checkpoint_dir), max_to_keep=keep, on_new_folder=on_new_folder
    )


def weights_to_evaluate(
    config: TrainConfig,
    workdir: Path,
    last: keras.Model,
    say: Callable[[str], None] = print,
    build: Callable[[], keras.Model] | None = None,
) -> keras.Model:
    """The model that `train.evaluate_with` chooses for the final evaluation.

    ``"last"``: `last` itself. ``"best"``: the weights with the best
    validation BLEU (`last` when no validation ran yet). ``"average"``: the
    average of the kept checkpoints (§6.1: "averaging the last 5
    checkpoints"), written by `average_checkpoints` (`last` when there is
    no checkpoint). `build` makes an empty model of the run's kind
    (default: `build_transformer(config.model)`).
    """
    choice = config.train.evaluate_with
    if choice == "best":
        path = workdir / BEST_WEIGHTS
        if not path.is_file():
            say(f"No {path} (no validation ran yet): evaluating the last weights.")
            return last
    elif choice == "average":
        available = len(checkpoint_paths(workdir / CHECKPOINT_DIR))
        if not available:
            return last
        path = average_checkpoints(
            workdir, last=min(available, config.train.keep_checkpoints)
        )
    else:
        return last
    model = build() if build else build_transformer(config.model)
    RunFolder(workdir)._load_weights_file(
        model, path, run_fingerprint(workdir / CHECKPOINT_DIR)
    )
    return model


def _newest_intact(checkpoint_dir: Path, count: int) -> list[str]:
    """Up to `count` newest intact checkpoints, oldest first.

    Damaged ones are skipped with a warning naming the file and left in
    place (averaging only reads the checkpoints; the next `train` of the
    run, which holds its lock, moves them aside). One of another run is
    refused (`ForeignCheckpointError`).
    """
    expected = run_fingerprint(checkpoint_dir)
    for prefix in checkpoint_paths(checkpoint_dir):
        if checkpoint_problem(prefix, read_tensors=False) is None:
            check_fingerprint(prefix, checkpoint_fingerprint(prefix), expected)
    paths = checkpoint_paths(checkpoint_dir)
    if len(paths) < count:
        return paths
    found: list[str] = []
    for prefix in reversed(paths):
        if len(found) == count:
            break
        problem = checkpoint_problem(prefix)
        if problem is None:
            found.append(prefix)
            continue
        logger.warning(
            "Checkpoint %s is damaged: %s. Its files were left in place (the next "
            "`keras-transformer train` of the run moves them aside); averaging "
            "the intact checkpoints before it.",
            Path(prefix).name,
            problem,
        )
    return found[::-1]


def mean_of_weights(snapshots: Iterable[list[np.ndarray]]) -> list[np.ndarray]:
    """The arithmetic mean of each weight over `snapshots` (§6.1), in float64.

    What `average_checkpoints` and `fit_callbacks.CheckpointAveraging`
    compute: each snapshot is a model's ``get_weights()``; the sums are
    taken in float64, one snapshot at a time (a generator keeps only one in
    memory), and divided by their number; `keras.Model.set_weights` casts
    them back to each weight's dtype.

    Args:
        snapshots: one list of arrays per checkpoint, all of the same shapes.

    Returns:
        The mean of each weight, float64.

    Raises:
        ValueError: when `snapshots` is empty.

    Example:
    >>> mean_of_weights([[np.array([1.0, 2.0])], [np.array([3.0, 6.0])]])
    [array([2., 4.])]
    """
    total: list[np.ndarray] | None = None
    count = 0
    for snapshot in snapshots:
        values = [np.asarray(w, "float64") for w in snapshot]
        total = (
            values
            if total is None
            else [t + v for t, v in zip(total, values, strict=True)]
        )
        count += 1
    if total is None:
        raise ValueError(
            "Cannot average no weights: pass at least one snapshot of the model."
        )
    return [t / count for t in total]


def average_output_file(
    workdir: str | os.PathLike[str], output: str | os.PathLike[str] | None
) -> Path:
    """The file `average_checkpoints` writes, checked to replace no run's file.

    The default, ``<workdir>/averaged.weights.h5`` (what ``--weights
    average`` reads), may also be given. Elsewhere in the run folder only a
    ``<name>.weights.h5`` directly in it whose name and whose info file
    ``<name>.json`` are none of the run's own entries (`RUN_ENTRIES`:
    ``best.weights.h5``, ``config.json``, ``data.json``,
    ``validation.json``...), never a file in one of its folders; outside
    it, never a file in another run's folder or in an export folder.

    Raises:
        ValueError: naming the file, what it would replace, and what to pass.
    """
    from keras_transformer.export.formats import check_output_placement

    workdir = Path(workdir)
    default = workdir / AVERAGED_WEIGHTS
    if output is None:
        return default
    output = Path(output)
    if not output.name.endswith(".weights.h5"):
        raise ValueError(
            f"--output {output} does not end in .weights.h5: an average is written "
            "in Keras' weights format; pass a file whose name ends in .weights.h5."
        )
    target = output.resolve()
    home = workdir.resolve()
    if target == default.resolve():
        return output
    advice = (
        f"Leave out --output (the average goes to {default}), "
        "or pass another name or a file outside the run folder."
    )
    if not target.is_relative_to(home):
        owner = enclosing_run(target)
        if owner is not None:
            raise ValueError(
                f"--output {output} lies in another run's folder ({owner}); an "
                f"average of {workdir} must not replace that run's files. {advice}"
            )
        check_output_placement(output, "--output", noun="file")
        return output
    if target.parent != home:
        raise ValueError(
            f"--output {output} lies in {target.parent.relative_to(home)}/ of the "
            f"run {workdir}, which holds the run's own files. {advice}"
        )
    info = weights_info_file(target).name
    replaced = [name for name in (target.name, info) if name in RUN_ENTRIES]
    if replaced:
        raise ValueError(
            f"--output {output} would replace {' and '.join(replaced)} of the run "
            f"{workdir} (its own weights and records). {advice}"
        )
    return output


def _average_newest(
    model: keras.Model, checkpoint_dir: Path, last: int, attempts: int = READ_ATTEMPTS
) -> list[str]:
    """Sets `model`'s weights to the mean of the `last` newest intact
    checkpoints; returns their prefixes.

    A `train` of the run may write checkpoints meanwhile (an average written
    outside the run takes no lock) and remove its oldest ones: when one of
    those read goes that way, the newest are chosen and read again.
    """
    config = str(checkpoint_dir.parent / CONFIG_FILE)

    def restored(path: str) -> list[np.ndarray]:
        _restore_model(model, path, config=config)
        return model.get_weights()

    for _ in range(attempts):
        paths = _newest_intact(checkpoint_dir, last)
        if not paths:
            listed = len(checkpoint_paths(checkpoint_dir))
            raise ValueError(
                f"Cannot average checkpoints: {checkpoint_dir} holds no "
                "checkpoint yet. Train the run first."
                if not listed
                else f"Cannot average checkpoints: none of the "
                f"{count_of(listed, 'checkpoint')} in {checkpoint_dir} is "
                "intact (the warnings say what is wrong). Restore them from a "
                "copy of the run."
            )
        if len(paths) < last:
            raise ValueError(
                f"Cannot average the last {count_of(last, 'checkpoint')}: "
                f"{checkpoint_dir} has "
                f"{len(paths)} intact ({[Path(p).name for p in paths]}). Average "
                "fewer (--last), or keep more with train.keep_checkpoints."
            )
        try:
            model.set_weights(mean_of_weights(restored(path) for path in paths))
            return paths
        except CheckpointRemovedError:
            continue  # a running train keeps only its newest ones
    raise CheckpointRemovedError(
        f"The checkpoints of {checkpoint_dir} were removed {attempts} times while "
        "they were read: a `keras-transformer train` of the run writes new ones "
        "and removes the oldest. Average fewer (--last), or again once it ends."
    )


def average_checkpoints(
    workdir: str | os.PathLike[str],
    last: int = 5,
    output: str | os.PathLike[str] | None = None,
) -> Path:
    """Averages the weights of the last `last` checkpoints of a run (§6.1).

    "For the base models, we used a single model obtained by averaging the
    last 5 checkpoints, which were written at 10-minute intervals. For the
    big models, we averaged the last 20 checkpoints." Each weight is the
    arithmetic mean of its values in the checkpoints (optimizer state is
    not averaged).

    Args:
        workdir: the run's work directory.
        last: how many of the newest checkpoints to average.
        output: the `.weights.h5` file to write (default
            ``<workdir>/averaged.weights.h5``); load it with
            `RunFolder(workdir).load(weights="average")` (any kind of run) or
            `load_trained_model(workdir, weights="average")` (translation).

    Returns:
        The path of the averaged weights.

    Raises:
        ValueError: when the run has fewer than `last` checkpoints, or
            `output` would replace a file of the run (``best.weights.h5``,
            ``best.json``, ``config.json``, anything in ``checkpoints/``...)
            or lies in another run's folder.
        ForeignCheckpointError: when one of them belongs to another run (or
            carries no fingerprint, see `keras_transformer.runs.check_fingerprint`).
        FolderLockedError: when another command writes the run folder.
    """
    check_path("`workdir`", workdir)
    workdir = Path(workdir)
    check_positive_int("last", last)
    run = RunFolder(workdir).check()
    # Every kind: the run's own model (a translation model, a classifier or
    # an Image Transformer), its tokenizer checked when the kind has one.
    tokenizer = run.stored_tokenizer()
    output = average_output_file(workdir, output)
    checkpoint_dir = workdir / CHECKPOINT_DIR
    model = run.build_model(tokenizer)
    # Into the run folder: its writer lock from the start, so that a running
    # `train` refuses the command before a checkpoint is read.
    inside = output.resolve().is_relative_to(workdir.resolve())
    lock = FolderLock(workdir, "keras-transformer average-checkpoints")
    with lock if inside else contextlib.nullcontext():
        paths = _average_newest(model, checkpoint_dir, last)
        info = {
            "checkpoints": [Path(p).name for p in paths],
            "steps": [checkpoint_step(p) for p in paths],
        }
        output.parent.mkdir(parents=True, exist_ok=True)
        save_weights(model, output, info, run_fingerprint(checkpoint_dir))
    return output


def load_trained_model(
    workdir: str | os.PathLike[str], weights: str = "last"
) -> tuple[keras.Model, SubwordTokenizer, TrainConfig]:
    """Rebuilds a trained model from its work directory, for inference.

    `keras_transformer.runs.RunFolder.load`, plus the run's `TrainConfig`.

    Args:
        workdir: the run's work directory.
        weights: ``"last"`` (the newest checkpoint), ``"best"`` (best
            validation BLEU), ``"average"`` (from `average_checkpoints`,
            §6.1), or the path of a checkpoint prefix or a ``.weights.h5``
            file.

    Returns:
        ``(model, tokenizer, config)``.
    """
    run = RunFolder(workdir).check()
    config = TrainConfig.load(run.config_file)
    model, tokenizer = run.load(weights)
    return model, tokenizer, config
