"""`RunFolder`: the work directory of one training run.

Its files, its config (the model section of ``config.json``), its
tokenizer, and its model with the last, best or averaged weights, each
checked to be the run's own and whole.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import keras

from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.files import FolderLock, read_json_object
from keras_transformer.models import TransformerConfig, build_transformer, get_preset
from keras_transformer.models.classifier import build_classifier
from keras_transformer.models.image_config import ImageTransformerConfig
from keras_transformer.models.image_transformer import build_image_transformer
from keras_transformer.runs import layout
from keras_transformer.runs.checkpoint_io import (
    restore_checkpoint,
    restore_model_weights,
    restore_newest_checkpoint,
    restore_or_explain,
)
from keras_transformer.runs.checkpoints import (
    CheckpointDamagedError,
    check_tokenizer,
    checkpoint_paths,
    checkpoint_problem,
    damaged_files,
)
from keras_transformer.runs.fingerprints import (
    CheckpointMismatchError,
    RunFingerprint,
    changed_model_settings,
    check_fingerprint,
    run_fingerprint,
)
from keras_transformer.runs.layout import (
    AVERAGED_INFO,
    AVERAGED_WEIGHTS,
    BEST_INFO,
    BEST_WEIGHTS,
    CHECKPOINT_DIR,
    CONFIG_FILE,
    LOG_DIR,
    RUN_ENTRIES,
    TOKENIZER_DIR,
    TRANSLATIONS_DIR,
    checkpoint_files,
    checkpoint_prefix,
    checkpoint_step,
)
from keras_transformer.runs.weights import (
    WEIGHTS_CHECKSUM_ATTRIBUTE,
    WEIGHTS_LAYOUT_ATTRIBUTE,
    weights_digest,
    weights_file_attribute,
    weights_file_fingerprint,
    weights_file_info,
    weights_file_problem,
    weights_layout_digest,
)
from keras_transformer.validation import check_path, first_few

__all__ = ["STORED_KINDS", "RunFolder", "StoredKind", "enclosing_run", "is_run_dir"]

logger = logging.getLogger(__name__)

#: The ``config.json`` files already warned of (once each per process).
_WARNED_SETTINGS: set[str] = set()


#: The model file of a CTranslate2 export, which writes a ``config.json`` of
#: its own beside it (`keras_transformer.export.ctranslate2`); no run holds one.
_CTRANSLATE2_MODEL = "model.bin"
#: The files that make a folder an export of another format, each with the
#: file its export holds beside it (a folder with one and not the other is an
#: export cut short, not a run): CTranslate2's, LiteRT's.
_OTHER_EXPORTS = {
    "ctranslate2": ("CTranslate2", _CTRANSLATE2_MODEL, "keras_transformer.json"),
    "litert": ("LiteRT", "model.tflite", "litert.json"),
}


def is_run_dir(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a training run: it holds ``config.json`` (and no
    ``model.bin`` or ``keras_transformer.json``: a CTranslate2 export holds a
    ``config.json`` too)."""
    path = Path(path)
    _, *ctranslate2_files = _OTHER_EXPORTS["ctranslate2"]
    return (path / CONFIG_FILE).is_file() and not any(
        (path / name).is_file() for name in ctranslate2_files
    )


def enclosing_run(path: str | os.PathLike[str]) -> Path | None:
    """The run folder that `path` lies in: its nearest parent that holds
    ``config.json`` and ``checkpoints/`` or ``tokenizer/`` (None: none does).
    """
    for folder in Path(path).resolve().parents:
        holds_run = any((folder / n).is_dir() for n in (CHECKPOINT_DIR, TOKENIZER_DIR))
        if holds_run and is_run_dir(folder):
            return folder
    return None


def _model_config(model: Any) -> TransformerConfig:
    """The `TransformerConfig` of a config file's ``model`` section."""
    if isinstance(model, str):
        return get_preset(model)
    if not isinstance(model, Mapping):
        raise ValueError(
            f"The model section of {CONFIG_FILE} must be a preset name or a "
            f"mapping of TransformerConfig fields. Received: {model!r}"
        )
    values = dict(model)
    preset = values.pop("preset", None)
    if preset is None:
        return TransformerConfig.from_dict(values)
    base = get_preset(preset)
    if isinstance(values.get("optimizer"), Mapping):
        values["optimizer"] = dataclasses.replace(base.optimizer, **values["optimizer"])
    return base.replace(**values)


@dataclasses.dataclass(frozen=True)
class StoredKind:
    """What reading a stored run of one kind needs (this package's layer
    knows no recipes, `keras_transformer.training.recipes`).

    Attributes:
        build_model: the freshly initialized model of the run, from its
            folder and its tokenizer (None without one).
        has_tokenizer: whether the run folder holds a tokenizer.
    """

    build_model: Callable[[RunFolder, SubwordTokenizer | None], keras.Model]
    has_tokenizer: bool = True


#: How the runs of each kind are read: the built-in kinds; a kind defined
#: elsewhere adds its own when its recipe is registered
#: (`Recipe.stored_kind`).
STORED_KINDS: dict[str, StoredKind] = {
    "translation": StoredKind(
        lambda folder, tokenizer: build_transformer(folder.model_config(tokenizer))
    ),
    "classification": StoredKind(
        lambda folder, tokenizer: build_classifier(folder.model_config(tokenizer))
    ),
    "image": StoredKind(
        lambda folder, _: build_image_transformer(
            ImageTransformerConfig.from_dict(folder.raw_config()["model"])
        ),
        has_tokenizer=False,
    ),
}


class RunFolder:
    """The work directory of one training run: its files, config and weights.

    Args:
        path: the folder (``keras-transformer train --workdir``). It need not
            exist yet: the trainer creates it; readers check with `check`.

    Example:
    >>> run = RunFolder("runs/dates")  # doctest: +SKIP
    >>> run.checkpoints()[-1]  # doctest: +SKIP
    'runs/dates/checkpoints/ckpt-600'
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        check_path("A run folder", path)
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise NotADirectoryError(
                f"{self.path} is a file, not a run folder: pass the folder of a "
                "`keras-transformer train` run (--workdir), or a new folder to "
                "train in."
            )

    def __repr__(self) -> str:
        return f"RunFolder({str(self.path)!r})"

    # -- layout ---------------------------------------------------------------
    @property
    def config_file(self) -> Path:
        return self.path / CONFIG_FILE

    @property
    def tokenizer_dir(self) -> Path:
        return self.path / TOKENIZER_DIR

    @property
    def checkpoint_dir(self) -> Path:
        return self.path / CHECKPOINT_DIR

    @property
    def log_dir(self) -> Path:
        return self.path / LOG_DIR

    @property
    def translations_dir(self) -> Path:
        return self.path / TRANSLATIONS_DIR

    @property
    def best_weights(self) -> Path:
        return self.path / BEST_WEIGHTS

    @property
    def averaged_weights(self) -> Path:
        return self.path / AVERAGED_WEIGHTS

    # -- reading --------------------------------------------------------------
    def check(self) -> RunFolder:
        """Returns self if the folder is a run; raises FileNotFoundError if not."""
        if not self.path.exists():
            raise FileNotFoundError(
                f"{self.path} does not exist: pass the --workdir of a "
                "`keras-transformer train` run."
            )
        if not os.access(self.path, os.R_OK | os.X_OK):
            raise PermissionError(
                f"{self.path} cannot be read (permission denied): fix its "
                "permissions or pass another run folder."
            )
        if not is_run_dir(self.path):
            raise FileNotFoundError(self._not_a_run())
        return self

    def _not_a_run(self) -> str:
        """Why the folder is not a run, naming what it holds (an export of
        another format, someone's files), in one line."""
        held = (
            sorted(e.name for e in self.path.iterdir() if not e.name.startswith("."))
            if self.path.is_dir()
            else []
        )
        runs = [name for name in held if is_run_dir(self.path / name)]
        if runs and not self.config_file.is_file():
            found = (
                f"its folder {runs[0]}/ is one: pass --workdir"
                if len(runs) == 1
                else f"its folders {first_few(runs, 3)} are: pass one as "
                "--workdir, e.g."
            )
            return (
                f"{self.path} is not a training work directory, but {found} "
                f"{self.path / runs[0]}."
            )
        incomplete = self._incomplete_export(held)
        if incomplete:
            return (
                f"{self.path} holds {incomplete}, so the export is incomplete: "
                "restore it from a copy, or export its run again."
            )
        if self.config_file.is_file():
            why = f"its {CONFIG_FILE} is a CTranslate2 export's"
        else:
            why = f"{CONFIG_FILE} is missing"
        if not held:
            return (
                f"{self.path} is not a training work directory: {why}. Pass the "
                "--workdir of a `keras-transformer train` run."
            )
        return (
            f"{self.path} is not a training work directory: {why} (it holds "
            f"{first_few(held, 4)}). Pass the --workdir of a `keras-transformer "
            "train` run; a CTranslate2 or LiteRT export is read by "
            "`keras-transformer translate --workdir` (in Python: "
            "CTranslate2Translator, LiteRTTranslator)."
        )

    def _incomplete_export(self, held: list[str]) -> str | None:
        """What the folder holds of an export that lacks a file its format
        reads (``"a LiteRT export's model.tflite but no litert.json"``), or
        None: a text kind's SavedModel export without ``tokenizer/`` (an image
        export has none), a CTranslate2 or LiteRT export without its model or
        its record."""
        for export_format, first, second in _OTHER_EXPORTS.values():
            if (first in held) != (second in held):
                present, absent = (first, second) if first in held else (second, first)
                return f"a {export_format} export's {present} but no {absent}"
        if layout.EXPORT_MODEL_FILE not in held or TOKENIZER_DIR in held:
            return None
        try:
            info = json.loads((self.path / layout.EXPORT_INFO_FILE).read_text())
        except (OSError, ValueError):
            info = {}
        if isinstance(info, dict) and info.get("kind") == "image":
            return None
        model = layout.EXPORT_MODEL_FILE
        return f"a SavedModel export's {model} but no {TOKENIZER_DIR}/"

    def check_trainable(self) -> RunFolder:
        """Returns self if `train` may write the folder: it is new, empty, a
        run, or holds only what a run writes (a run killed before its
        ``config.json``) and hidden files (temporary ones, ``.DS_Store``); one
        that holds other files (an export, a run's ``checkpoints/``, someone's
        files) is refused in one line naming them. So is a folder whose
        ``config.json`` is not a run's (a CTranslate2 export holds one of its
        own, which `train` replaced).
        """
        if not self.path.is_dir():
            return self
        if self.config_file.is_file():
            # A CTranslate2 export's config.json is not read (`is_run_dir`).
            sections = set(self.raw_config()) if is_run_dir(self.path) else set()
            if sections & {"model", "data", "train"}:
                return self
            raise ValueError(
                f"{self.config_file} is not a run's config (it has no model, data "
                "or train section; a CTranslate2 export holds such a file): train "
                "writes a run folder of its own. Pass a new or empty folder, or "
                "the --workdir of a run to resume."
            )
        run_names = {*RUN_ENTRIES, TRANSLATIONS_DIR}
        others = sorted(
            entry.name
            for entry in self.path.iterdir()
            if entry.name not in run_names and not entry.name.startswith(".")
        )
        if others:
            raise ValueError(
                f"{self.path} holds {first_few(others, 3)} but no run "
                f"({CONFIG_FILE}): train writes a run folder of its own. Pass a "
                "new or empty folder, or the --workdir of a run to resume."
            )
        return self

    def raw_config(self) -> dict[str, Any]:
        """The content of ``config.json``; `TrainConfig.load` parses it."""
        self.check()
        return read_json_object(
            self.config_file,
            "restore it from a copy of the run; it holds the run's settings.",
        )

    def kind(self) -> str:
        """The run's kind: ``config.json``'s ``kind`` (translation without
        one)."""
        return str(self.raw_config().get("kind", "translation"))

    def model_config(
        self, tokenizer: SubwordTokenizer | None = None
    ) -> TransformerConfig:
        """The run's `TransformerConfig`, with the tokenizer's vocabulary size."""
        config = _model_config(self.raw_config().get("model", "tiny"))
        tokenizer = tokenizer or self.tokenizer()
        return config.replace(vocabulary_size=tokenizer.vocabulary_size)

    def tokenizer(self) -> SubwordTokenizer:
        """The run's tokenizer, checked against its checkpoints."""
        if not self.check().tokenizer_dir.exists() and not self.checkpoints():
            writer = FolderLock(self.path, "").running_holder()
            if writer:
                state = (
                    f"{writer.get('command')} (PID {writer.get('pid')}) is "
                    "starting its training. Wait for its first checkpoint"
                )
            else:
                state = (
                    "its training was refused or stopped before it wrote them. "
                    f"Train it (keras-transformer train --workdir {self.path})"
                )
            raise FileNotFoundError(
                f"{self.path} holds no trained model yet (no tokenizer, no "
                f"checkpoint): {state}, or pass a trained run."
            )
        if not self.tokenizer_dir.is_dir():
            raise FileNotFoundError(
                f"{self.path} has checkpoints but no tokenizer ({self.tokenizer_dir} "
                "is missing): restore it from a copy of the run, or run "
                f"`keras-transformer train --workdir {self.path}`, which learns it "
                "again from the run's data and checks it against the checkpoints."
            )
        tokenizer = SubwordTokenizer.load(self.tokenizer_dir)
        check_tokenizer(self.checkpoint_dir, tokenizer)
        return tokenizer

    def checkpoints(self) -> list[str]:
        """The kept checkpoints, oldest first."""
        return checkpoint_paths(self.checkpoint_dir)

    def stored_kind(self) -> StoredKind:
        """How this run's kind is read (`STORED_KINDS`)."""
        kind = self.kind()
        if kind not in STORED_KINDS:
            raise ValueError(
                f"{self.config_file}: kind {kind!r} is not known here (known: "
                f"{', '.join(sorted(STORED_KINDS))}); import the module that "
                "registers it."
            )
        return STORED_KINDS[kind]

    def stored_tokenizer(self) -> SubwordTokenizer | None:
        """The run's tokenizer (`tokenizer`), or None for a kind without one."""
        return self.tokenizer() if self.stored_kind().has_tokenizer else None

    def build_model(self, tokenizer: SubwordTokenizer | None = None) -> keras.Model:
        """A freshly initialized model of the run's configuration (and kind)."""
        return self.stored_kind().build_model(self, tokenizer)

    def restore(self, model: keras.Model, weights: str = "last") -> None:
        """Loads `weights` into `model`.

        Args:
            model: a model of the run's configuration (`build_model`).
            weights: ``"last"`` (the newest intact checkpoint: a damaged
                one is skipped with a warning and left in place, see
                `restore_newest_checkpoint`), ``"best"`` (best validation
                BLEU), ``"average"`` (``average-checkpoints``, §6.1), or the
                path of a checkpoint (its prefix, ``.index`` or ``.data-*``
                file: `checkpoint_prefix`) or a ``.weights.h5`` file.

        Raises:
            CheckpointDamagedError: when every checkpoint (or the one named)
                is damaged.
            ForeignCheckpointError: when the weights are another run's, or
                carry no fingerprint (see `check_fingerprint`).
            FileNotFoundError: when the weights named do not exist.
            ValueError: when `weights` is a file that holds no weights.
        """
        expected = self.fingerprint()
        config = str(self.config_file)
        self._warn_of_changed_model_settings()
        if weights == "last":
            # The newest intact checkpoint; damaged ones are skipped with a
            # warning and left in place (a reader holds no lock to move them).
            restored = restore_newest_checkpoint(
                self.checkpoint_dir,
                lambda path: restore_model_weights(model, path, config),
                expected,
            )
            if restored is None and damaged_files(self.checkpoint_dir):
                names = ", ".join(p.name for p in damaged_files(self.checkpoint_dir))
                raise CheckpointDamagedError(
                    f"{self.checkpoint_dir} holds no intact checkpoint, only damaged "
                    f"files moved aside earlier ({names[:200]}): restore them from "
                    "a backup, or pass --weights best/average/<file>."
                )
            if restored is None:
                raise FileNotFoundError(
                    f"{self.checkpoint_dir} holds no checkpoint yet: train first, "
                    "or pass --weights best/average/<file>."
                )
        elif weights in ("best", "average"):
            path = self.best_weights if weights == "best" else self.averaged_weights
            if not path.is_file():
                how = (
                    "it is written when train.keep_best is true and a validation ran"
                    if weights == "best"
                    else "run `keras-transformer average-checkpoints` first"
                )
                raise FileNotFoundError(f"{path} does not exist: {how}.")
            self._load_weights_file(model, path, expected)
            if weights == "average":
                self._warn_of_an_older_average()
        elif str(weights).endswith(".weights.h5"):
            self._load_weights_file(model, Path(weights), expected)
        else:
            prefix = checkpoint_prefix(weights)
            if not checkpoint_files(prefix):
                names = [Path(p).name for p in checkpoint_paths(self.checkpoint_dir)]
                problem = (
                    "is a file but neither a .weights.h5 file nor a checkpoint"
                    if Path(prefix).is_file()
                    else f"names no checkpoint (no file {Path(prefix).name}.index "
                    "or .data-*)"
                )
                error = ValueError if Path(prefix).exists() else FileNotFoundError
                raise error(
                    f"--weights {weights} {problem}. The run's checkpoints: "
                    f"{', '.join(names) or 'none yet'}; pass one of them, or "
                    "last, best, average or a .weights.h5 file."
                )
            restore_checkpoint(model, prefix, expected, config)

    def _warn_of_an_older_average(self) -> None:
        """A warning when the run has trained on since its average was
        written: the average is of the checkpoints of then (§6.1's "last 5
        checkpoints" are no longer the last)."""
        averaged, last = self.weights_step("average"), self.weights_step("last")
        if 0 < averaged < last:
            logger.warning(
                "%s averages checkpoints up to step %d, but the run has trained "
                "to step %d since: run `keras-transformer average-checkpoints "
                "--workdir %s` again to average the newest.",
                self.averaged_weights,
                averaged,
                last,
                self.path,
            )

    def _warn_of_changed_model_settings(self) -> None:
        """One warning (per process) when ``config.json``'s model settings
        are not those the checkpoints were trained with: settings that keep
        every weight's shape (``num_heads``, ``norm_first``, ...) load, and
        then compute something else."""
        if str(self.config_file) in _WARNED_SETTINGS:
            return
        changed = changed_model_settings(
            self.checkpoint_dir, self.raw_config().get("model")
        )
        if changed:
            _WARNED_SETTINGS.add(str(self.config_file))
            logger.warning(
                "%s sets other model settings than the run was trained with "
                "(%s): the weights load but compute something else. Restore "
                "the run's settings, unless you changed them on purpose.",
                self.config_file,
                "; ".join(changed),
            )

    def fingerprint(self) -> RunFingerprint | None:
        """The run's fingerprint (`run_fingerprint`; None when nothing records one)."""
        return run_fingerprint(self.checkpoint_dir)

    def _load_weights_file(
        self, model: keras.Model, path: Path, expected: RunFingerprint | None
    ) -> None:
        """Loads a ``.weights.h5`` file: whole, the run's own (the fingerprint
        the file itself carries, `check_fingerprint`), and with the weights
        its checksum names.

        Raises:
            CheckpointDamagedError: naming the damaged file.
            ForeignCheckpointError: when it is another run's, or carries no
                fingerprint (`accepting_weights_without_fingerprint`).
            CheckpointMismatchError: when it does not fit the model.
        """
        advice = "Pick other weights (--weights), or restore the file from a backup."
        problem = weights_file_problem(path)
        if problem is not None:
            raise CheckpointDamagedError(f"Cannot load {path}: {problem}. {advice}")
        check_fingerprint(path, weights_file_fingerprint(path), expected)
        config = self.config_file
        # The dtypes and shapes written with the file tell a model of other
        # settings (a mismatch) from a file that does not read back (damage).
        layout = weights_file_attribute(path, WEIGHTS_LAYOUT_ATTRIBUTE)
        if layout is not None and layout != weights_layout_digest(model):
            raise CheckpointMismatchError(
                f"{path} does not match the model built from {config}: its weights "
                f"have other shapes. Either {config} was changed after the file was "
                "written (restore the run's own settings), or the file comes from "
                "a run with other model sizes."
            )
        try:
            restore_or_explain(lambda: model.load_weights(path), str(path), str(config))
        except CheckpointMismatchError as e:
            if layout is None:
                raise
            raise CheckpointDamagedError(
                f"Cannot load {path}: {path} is damaged (Keras cannot read it whole "
                f"although it fits the model). {advice}"
            ) from e
        # Keras may also skip part of a damaged file without an error (the
        # weights it did not find keep their values): the checksum tells.
        checksum = weights_file_attribute(path, WEIGHTS_CHECKSUM_ATTRIBUTE)
        if checksum is not None and checksum != weights_digest(model):
            raise CheckpointDamagedError(
                f"Cannot load {path}: {path} is damaged (the weights read from it "
                f"are not the ones written into it). {advice}"
            )

    def load(
        self, weights: str = "last"
    ) -> tuple[keras.Model, SubwordTokenizer | None]:
        """The trained model (with `weights`, see `restore`) and its tokenizer
        (None for an image run)."""
        tokenizer = self.stored_tokenizer()
        model = self.build_model(tokenizer)
        self.restore(model, weights)
        return model, tokenizer

    def weights_step(self, weights: str = "last") -> int:
        """The training step of the named weights (0 when unknown)."""
        try:
            if weights == "last":
                # The checkpoint that `restore` loads: the newest intact one.
                for path in reversed(self.checkpoints()):
                    if checkpoint_problem(path) is None:
                        return checkpoint_step(path)
                return 0
            # The weights file's own record first (`weights_file_info`), the
            # .json beside it for a file written without one.
            if weights == "best":
                info = weights_file_info(self.best_weights) or json.loads(
                    (self.path / BEST_INFO).read_text()
                )
                return int(info["step"])
            if weights == "average":
                info = weights_file_info(self.averaged_weights) or json.loads(
                    (self.path / AVERAGED_INFO).read_text()
                )
                return int(info["steps"][-1])
        except (OSError, ValueError, KeyError, IndexError):
            return 0
        return 0
