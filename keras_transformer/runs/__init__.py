"""Folders on disk: a training run (`RunFolder`) and an export (`is_export_dir`).

A training run's folder (``keras-transformer train --workdir``) holds:

```text
config.json           the resolved TrainConfig
tokenizer/            the shared SubwordTokenizer (tokenizer.model/.json)
checkpoints/          tf.train checkpoints ckpt-<step> (model + optimizer +
                      the run's fingerprint), and checkpoints.json (the run
                      id, tokenizer and config they belong to)
best.weights.h5       the weights with the best validation BLEU (+ best.json)
averaged.weights.h5   the average of the last checkpoints (§6.1, + averaged.json)
logs/                 TensorBoard logs
translations/         hypotheses written by ``keras-transformer evaluate``
result.json           the final scores
data.json             the training examples as read (number, SHA-256) and
                      the data files' fingerprints (task "files")
validation.json       the last epoch-end checkpoint's step, and whether its
                      epoch's validation was done
writer.lock           the one writer's lock (`keras_transformer.files.FolderLock`)
```

An export folder (``keras-transformer export``) holds a SavedModel plus
``model.keras``, ``tokenizer/`` and ``export.json``.

This package knows these layouts and nothing about training: it reads the
model section of ``config.json`` (a `TransformerConfig`) and leaves the full
`kt.training.TrainConfig` to `kt.training`, which sits above it. The
translator (`kt.translation.load_translator`), the exporter and
`kt.training.load_trained_model` all open runs through `RunFolder`.

The package's modules, one per concern, each importing only those listed
before it:

* `keras_transformer.runs.layout`: the names of a run's files and folders
  (`CONFIG_FILE`, `CHECKPOINT_DIR`, `WEIGHTS`, ...) and of a checkpoint's
  files (`checkpoint_prefix`, `checkpoint_step`, `checkpoint_files`);
* `keras_transformer.runs.fingerprints`: `RunFingerprint`, the run's
  ``checkpoints.json`` and the checks that weights are the run's own
  (`check_fingerprint`, `accepting_weights_without_fingerprint`);
* `keras_transformer.runs.checkpoints`: the checkpoints of a folder and
  their record (`checkpoint_paths`, `checkpoint_problem`,
  `quarantine_checkpoint`, `check_tokenizer`);
* `keras_transformer.runs.checkpoint_io`: writing them whole
  (`save_checkpoint`, `CheckpointManager`) and restoring the newest intact
  one (`restore_newest_checkpoint`, `restore_checkpoint`);
* `keras_transformer.runs.weights`: ``.weights.h5`` files (`save_weights`,
  `weights_file_problem`, `weights_file_fingerprint`);
* `keras_transformer.runs.folder`: `RunFolder` and `is_run_dir`;
* `keras_transformer.runs.exports`: `is_export_dir`, `load_export` and
  `run_kind`;
* `keras_transformer.runs.logs`: the TensorBoard records
  (`logged_scalars`, `logged_training_seconds`).

This package lists their public names.

Example:
>>> from keras_transformer.runs import RunFolder
>>> run = RunFolder("runs/dates")  # doctest: +SKIP
>>> model, tokenizer = run.load(weights="average")  # doctest: +SKIP

Reference: Vaswani et al. (2017), §6.1 (checkpoint averaging).
"""

from __future__ import annotations

from keras_transformer.runs.checkpoint_io import (
    CheckpointManager,
    record_checkpoints_on_disk,
    restore_checkpoint,
    restore_newest_checkpoint,
    save_checkpoint,
)
from keras_transformer.runs.checkpoints import (
    CheckpointDamagedError,
    CheckpointRemovedError,
    CheckpointWriteError,
    check_tokenizer,
    checkpoint_paths,
    checkpoint_problem,
    forget_checkpoint,
    quarantine_checkpoint,
    record_checkpoint,
    recorded_checkpoints,
    write_checkpoint_state,
)
from keras_transformer.runs.exports import (
    is_export_dir,
    load_export,
    run_kind,
)
from keras_transformer.runs.fingerprints import (
    CheckpointMismatchError,
    ForeignCheckpointError,
    RunFingerprint,
    accepting_weights_without_fingerprint,
    check_fingerprint,
    checkpoint_fingerprint,
    run_fingerprint,
    write_checkpoint_metadata,
)
from keras_transformer.runs.folder import (
    STORED_KINDS,
    RunFolder,
    StoredKind,
    enclosing_run,
    is_run_dir,
)
from keras_transformer.runs.layout import (
    AVERAGED_WEIGHTS,
    BEST_INFO,
    BEST_WEIGHTS,
    CHECKPOINT_DIR,
    CONFIG_FILE,
    EXPORT_INFO_FILE,
    EXPORT_MODEL_FILE,
    LOG_DIR,
    RESULT_FILE,
    TOKENIZER_DIR,
    TRANSLATIONS_DIR,
    VALIDATION_RECORD,
    WEIGHTS,
    WORKERS_DIR,
    checkpoint_files,
    checkpoint_prefix,
    checkpoint_step,
)
from keras_transformer.runs.logs import (
    logged_scalars,
    logged_training_seconds,
)
from keras_transformer.runs.weights import (
    WEIGHTS_FINGERPRINT_ATTRIBUTE,
    save_weights,
    weights_file_fingerprint,
    weights_file_problem,
    weights_nbytes,
)

__all__ = [
    "logged_scalars",
    "logged_training_seconds",
    "AVERAGED_WEIGHTS",
    "BEST_INFO",
    "BEST_WEIGHTS",
    "CHECKPOINT_DIR",
    "CONFIG_FILE",
    "EXPORT_INFO_FILE",
    "EXPORT_MODEL_FILE",
    "LOG_DIR",
    "RESULT_FILE",
    "TOKENIZER_DIR",
    "TRANSLATIONS_DIR",
    "VALIDATION_RECORD",
    "WEIGHTS",
    "WORKERS_DIR",
    "CheckpointDamagedError",
    "CheckpointRemovedError",
    "CheckpointManager",
    "CheckpointMismatchError",
    "CheckpointWriteError",
    "ForeignCheckpointError",
    "RunFingerprint",
    "WEIGHTS_FINGERPRINT_ATTRIBUTE",
    "accepting_weights_without_fingerprint",
    "checkpoint_prefix",
    "weights_file_fingerprint",
    "weights_file_problem",
    "RunFolder",
    "STORED_KINDS",
    "StoredKind",
    "check_fingerprint",
    "check_tokenizer",
    "checkpoint_fingerprint",
    "checkpoint_files",
    "checkpoint_paths",
    "checkpoint_problem",
    "checkpoint_step",
    "forget_checkpoint",
    "is_export_dir",
    "enclosing_run",
    "is_run_dir",
    "load_export",
    "quarantine_checkpoint",
    "restore_checkpoint",
    "record_checkpoint",
    "record_checkpoints_on_disk",
    "recorded_checkpoints",
    "restore_newest_checkpoint",
    "run_fingerprint",
    "run_kind",
    "save_checkpoint",
    "save_weights",
    "weights_nbytes",
    "write_checkpoint_metadata",
    "write_checkpoint_state",
]
