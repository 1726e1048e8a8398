"""Keras callbacks for a plain `model.fit`: checkpoint averaging, BLEU stopping.

`keras-transformer train` averages checkpoints (`average_checkpoints`) and
keeps the weights of the best validation BLEU (`callbacks.BestWeights`) for
its own runs. These two callbacks give the same to someone who builds a
model with `keras_transformer.models.build_transformer` and calls
``model.fit`` themselves:

* `CheckpointAveraging`: the weights of the last N epochs, averaged at the
  end of training (Vaswani et al. 2017, §6.1: "a single model obtained by
  averaging the last 5 checkpoints"); the same mean as `average_checkpoints`
  (`checkpoints.mean_of_weights`).
* `BleuEarlyStopping`: Keras' `EarlyStopping` on a corpus sacreBLEU that the
  package's `Translator` computes at the end of each epoch (``val_bleu`` in
  the logs, so `TensorBoard` and `CSVLogger` record it).
"""

from __future__ import annotations

import collections
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np

from keras_transformer.data import SubwordTokenizer
from keras_transformer.decoding import DecodeSettings
from keras_transformer.training.checkpoints import mean_of_weights
from keras_transformer.translation import Translator
from keras_transformer.translation.lines import refuse_empty_pairs
from keras_transformer.validation import check_positive_int

__all__ = ["BleuEarlyStopping", "CheckpointAveraging"]

#: The key of the validation BLEU in `fit`'s logs (as in `train`'s runs).
BLEU_LOG_KEY = "val_bleu"


class CheckpointAveraging(keras.callbacks.Callback):
    """Keeps the weights of the last `last_n` epochs; sets the model to their mean.

    At the end of each epoch the model's weights (``model.get_weights()``,
    not the optimizer's state) are kept, in memory or, with a `directory`,
    as ``epoch-<n>.weights.h5`` files there (older files beyond the last
    `last_n` are deleted). At the end of training (or when `apply` is
    called) each weight becomes the arithmetic mean of its kept values,
    computed in float64 as `average_checkpoints` does. With fewer epochs
    than `last_n`, the mean is over those there are (`count`).

    Args:
        last_n: how many of the newest epochs to average (§6.1: 5 for the
            base models, 20 for the big ones).
        directory: keep the snapshots as files there instead of in memory
            (a large model); None keeps them in memory.
        apply_on_train_end: set the model to the average when `fit` ends;
            False leaves the last weights (call `apply` yourself).

    Raises:
        ValueError: when `last_n` is not a positive integer.

    Example:
    >>> import keras, numpy as np
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    >>> model.compile(optimizer="sgd", loss="mse")
    >>> averaging = CheckpointAveraging(last_n=2)
    >>> history = model.fit(np.ones((8, 3)), np.ones((8, 1)), epochs=4,
    ...                     verbose=0, callbacks=[averaging])
    >>> averaging.count  # the model now holds the mean of epochs 3 and 4
    2

    Reference: Vaswani et al. (2017), §6.1.
    """

    def __init__(
        self,
        last_n: int = 5,
        directory: str | os.PathLike[str] | None = None,
        *,
        apply_on_train_end: bool = True,
    ) -> None:
        super().__init__()
        check_positive_int("last_n", last_n)
        self.last_n = last_n
        self.directory = None if directory is None else Path(directory)
        self.apply_on_train_end = apply_on_train_end
        # Snapshots in memory, or the paths of their files.
        self._kept: collections.deque[Any] = collections.deque(maxlen=last_n)

    @property
    def count(self) -> int:
        """The number of snapshots the average is over (at most `last_n`)."""
        return len(self._kept)

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self._kept.clear()

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if self.directory is None:
            self._kept.append([np.array(w) for w in self.model.get_weights()])
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"epoch-{epoch + 1:04d}.weights.h5"
        self.model.save_weights(path, overwrite=True)
        if len(self._kept) == self.last_n:
            oldest = self._kept[0]
            if oldest != path:
                oldest.unlink(missing_ok=True)
        self._kept.append(path)

    def _snapshots(self) -> Any:
        """Each kept snapshot's weights, one at a time (files: loaded in turn)."""
        if self.directory is None:
            yield from self._kept
            return
        current = self.model.get_weights()
        try:
            for path in self._kept:
                self.model.load_weights(path)
                yield self.model.get_weights()
        finally:
            self.model.set_weights(current)

    def average(self) -> list[np.ndarray]:
        """The mean of each weight over the kept snapshots (float64).

        Raises:
            ValueError: before the first epoch has ended.
        """
        if not self._kept:
            raise ValueError(
                "CheckpointAveraging has no snapshot yet: it keeps one at the end "
                "of each epoch of fit; call average() after at least one epoch."
            )
        return mean_of_weights(self._snapshots())

    def apply(self) -> None:
        """Sets the model's weights to `average` (see there)."""
        self.model.set_weights(self.average())

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        if self.apply_on_train_end and self._kept:
            self.apply()


class BleuEarlyStopping(keras.callbacks.EarlyStopping):
    """Stops `fit` when the validation BLEU has stopped improving.

    At the end of each epoch the `sources` are translated with the
    package's `Translator` (greedy by default; any `DecodeSettings`, e.g.
    beam 4 and alpha 0.6 of §6.1) and scored against `references` with
    sacreBLEU (`translation.score_translations`: 13a, mixed case). The score
    is written into the epoch's logs as ``val_bleu`` (so `TensorBoard`,
    `CSVLogger` and the `History` see it, when they come after this callback
    in the list) and is then `keras.callbacks.EarlyStopping`'s monitored
    value (mode ``"max"``): training stops after `patience` epochs without an
    improvement of more than `min_delta`, and with `restore_best_weights`
    the model ends with the weights of its best epoch.

    Args:
        sources: validation source sentences (a sample: each epoch
            translates all of them).
        references: one reference translation per source.
        tokenizer: the model's `SubwordTokenizer`.
        settings: the decoding settings; None: greedy (what `train`'s
            validation reports).
        patience: epochs without improvement before stopping.
        min_delta: the smallest BLEU gain that counts as an improvement.
        restore_best_weights: end with the weights of the best epoch.
        start_from_epoch: epochs to wait before the first comparison.
        verbose: 1 prints when it stops and restores.
        **translator_options: other arguments of `Translator`
            (``beam_size``, ``batch_size``, ``max_output_length``, ...).

    Raises:
        ValueError: when `sources` and `references` differ in length or are
            empty, or `patience` is negative.

    Example:
    >>> stopping = BleuEarlyStopping(  # doctest: +SKIP
    ...     pairs.sources[:200], pairs.targets[:200], tokenizer, patience=3
    ... )
    >>> csv = keras.callbacks.CSVLogger("log.csv")  # doctest: +SKIP
    >>> history = model.fit(  # doctest: +SKIP
    ...     dataset, epochs=50, callbacks=[stopping, csv]
    ... )
    >>> history.history["val_bleu"]  # doctest: +SKIP
    [12.3, 25.1, 31.0, 30.8, 30.9, 30.7]

    Reference: Vaswani et al. (2017), §6.1 (decoding), §6.2 (development
    set BLEU); Post (2018) for sacreBLEU.
    """

    def __init__(
        self,
        sources: Sequence[str],
        references: Sequence[str],
        tokenizer: SubwordTokenizer,
        settings: DecodeSettings | None = None,
        *,
        patience: int = 3,
        min_delta: float = 0.0,
        restore_best_weights: bool = True,
        start_from_epoch: int = 0,
        verbose: int = 0,
        **translator_options: Any,
    ) -> None:
        if isinstance(sources, str) or isinstance(references, str):
            raise TypeError(
                "BleuEarlyStopping needs lists of sentences as sources and "
                "references; wrap one sentence in a list."
            )
        sources, references = list(sources), list(references)
        if len(sources) != len(references):
            raise ValueError(
                f"BleuEarlyStopping got {len(sources)} sources but "
                f"{len(references)} references; pass one reference per source."
            )
        if not sources:
            raise ValueError(
                "BleuEarlyStopping needs at least one validation sentence; pass "
                "a sample of the validation pairs as sources and references."
            )
        # Refused now, not at the end of the first epoch.
        refuse_empty_pairs(sources, references)
        if not isinstance(tokenizer, SubwordTokenizer):
            raise TypeError(
                "BleuEarlyStopping needs the model's SubwordTokenizer. Received: "
                f"{type(tokenizer).__name__}"
            )
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 0:
            raise ValueError(
                f"patience must be an integer >= 0 (epochs). Received: {patience!r}"
            )
        super().__init__(
            monitor=BLEU_LOG_KEY,
            min_delta=min_delta,
            patience=patience,
            verbose=verbose,
            mode="max",
            restore_best_weights=restore_best_weights,
            start_from_epoch=start_from_epoch,
        )
        self.sources, self.references = sources, references
        self.tokenizer = tokenizer
        if settings is None and "beam_size" not in translator_options:
            translator_options["beam_size"] = 1
        self.settings = settings
        self.translator_options = translator_options
        #: The BLEU of each epoch, in order.
        self.scores: list[float] = []

    def translator(self) -> Translator:
        """The `Translator` of the model being trained, with these settings."""
        return Translator(
            self.model, self.tokenizer, self.settings, **self.translator_options
        )

    def score(self) -> float:
        """The corpus sacreBLEU of the model's translations of `sources`."""
        result = self.translator().evaluate(
            self.sources, self.references, split="validation"
        )
        return result.bleu

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        super().on_train_begin(logs)
        self.scores = []

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        logs = {} if logs is None else logs
        bleu = float(self.score())
        self.scores.append(bleu)
        logs[BLEU_LOG_KEY] = bleu
        super().on_epoch_end(epoch, logs)
