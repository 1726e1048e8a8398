"""Classifying raw reviews with a classification run or its export.

One function reads a review as training did (`classify_function`: lowercased
when the run lowercased, tokenized by the run's tokenizer, cut by
`keras_transformer.data.imdb.cut_review_ids`, then the encoder of §3.1 with
mean pooling and one sigmoid): the SavedModel's ``classify`` signature
(`keras_transformer.export.export_classifier`) traces it, and
`ReviewClassifier`, what ``keras-transformer classify`` runs, calls it in
this process, so that a run, its export and the served SavedModel give the
same probabilities.

Example:
>>> from keras_transformer.export import ReviewClassifier
>>> classifier = ReviewClassifier.load("runs/imdb", "best")  # doctest: +SKIP
>>> classifier.classify(["A wonderful film."])  # P(positive) # doctest: +SKIP
array([0.93], dtype=float32)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_transformer import validation
from keras_transformer.conventions import PAD_ID
from keras_transformer.data.imdb import REVIEW_READING, cut_review_ids
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.runs import RunFolder, is_run_dir, load_export, run_kind
from keras_transformer.runs.exports import check_export_weights
from keras_transformer.runs.layout import EXPORT_MODEL_FILE

__all__ = ["ReviewClassifier", "classify_function", "load_classifier"]

#: The settings of a classification export (``export.json``) that say how
#: a review is read: ``data.max_sentence_length``, and the
#: ``classification`` section's ``tail_tokens`` and ``lowercase``.
READING_SETTINGS = ("max_length", "tail_tokens", "lowercase")


def classify_function(
    model: keras.Model, tokenizer: SubwordTokenizer, settings: dict[str, Any]
) -> Callable[[tf.Tensor], dict[str, tf.Tensor]]:
    """Reviews (``tf.string [batch]``) -> ``probabilities`` (float32
    ``[batch, 2]``: P(negative), P(positive)) and ``labels`` (int32
    ``[batch]``: 1 where P(positive) > 0.5, the rule of the run's accuracy).

    `settings` holds `READING_SETTINGS`: how training read a review."""

    def classify(texts: tf.Tensor) -> dict[str, tf.Tensor]:
        if settings["lowercase"]:
            texts = tf.strings.lower(texts, encoding="utf-8")
        ids = cut_review_ids(
            tokenizer.tokenize(texts), settings["max_length"], settings["tail_tokens"]
        )
        # (batch, 1): P(positive), as the classifier computes it in training.
        positive = model(ids.to_tensor(PAD_ID), training=False)[:, 0]
        positive = tf.cast(positive, tf.float32)
        return {
            "probabilities": tf.stack([1.0 - positive, positive], axis=1),
            "labels": tf.cast(positive > 0.5, tf.int32),
        }

    return classify


def load_classifier(
    folder: str | os.PathLike[str], weights: str = "last"
) -> tuple[keras.Model, SubwordTokenizer, dict[str, Any]]:
    """``(model, tokenizer, settings)`` of a classification run (its `weights`:
    ``last``, ``best``, ``average`` or a weights file) or of a classification
    export; `settings` holds `READING_SETTINGS`.

    Raises:
        FileNotFoundError: for a folder that is neither a run nor an export.
        ValueError: for a run or an export of another kind, or `weights`
            given for an export (it holds its own).
    """
    if not (is_run_dir(folder) or (Path(folder) / EXPORT_MODEL_FILE).is_file()):
        RunFolder(folder).check()  # neither a run nor an export: what it holds
    kind = run_kind(folder)
    if kind != "classification":
        what = "run" if is_run_dir(folder) else "export"
        raise ValueError(
            f"{folder} is {validation.with_article(kind)} {what}, not a "
            "classification one: pass the folder of a classification run "
            "(train --workdir) or of its export."
        )
    if is_run_dir(folder):
        run = RunFolder(folder)
        model, tokenizer = run.load(weights)
        config = run.raw_config()  # the kind's section: `ClassificationConfig`
        options = config.get("classification") or {}
        settings = {
            "max_length": config["data"]["max_sentence_length"],
            **{k: options[k] for k in ("tail_tokens", "lowercase") if k in options},
        }
    else:  # an export
        check_export_weights(folder, weights)
        model, tokenizer, info = load_export(folder)
        settings = {k: info[k] for k in READING_SETTINGS}
    return model, tokenizer, settings


class ReviewClassifier:
    """A classification model with the reading of its run: raw reviews in,
    P(positive) out (`classify`), `batch_size` reviews at a time.

    Args:
        model: a model from `build_classifier` (a classification run's).
        tokenizer: the `SubwordTokenizer` it was trained with.
        settings: `READING_SETTINGS` (how training read a review);
            `data.imdb.REVIEW_READING` where left out.
        batch_size: reviews classified together (more: faster, more memory).
    """

    def __init__(
        self,
        model: keras.Model,
        tokenizer: SubwordTokenizer,
        settings: dict[str, Any],
        batch_size: int = 32,
    ) -> None:
        validation.check_int("batch_size", batch_size, 1)
        self.settings = {**REVIEW_READING, **settings}
        self.batch_size = batch_size
        self._classify = tf.function(
            classify_function(model, tokenizer, self.settings),
            input_signature=[tf.TensorSpec([None], tf.string)],
        )

    @classmethod
    def load(
        cls, folder: str | os.PathLike[str], weights: str = "last", batch_size: int = 32
    ) -> ReviewClassifier:
        """The classifier of a classification run folder (with its `weights`)
        or export folder (`load_classifier`)."""
        validation.check_path("`folder`", folder)
        model, tokenizer, settings = load_classifier(Path(folder), weights)
        return cls(model, tokenizer, settings, batch_size)

    def classify(self, reviews: Sequence[str]) -> np.ndarray:
        """P(positive) of each review, float32 ``[len(reviews)]``, in order; a
        review is positive where it is over 0.5.

        Raises:
            TypeError: for one string instead of a list of reviews (each of
                its characters would be classified as a review), or a
                review that is not a str.
        """
        reviews = validation.check_lines("reviews", reviews)
        found = [
            self._classify(tf.constant(list(reviews[first : first + self.batch_size])))
            for first in range(0, len(reviews), self.batch_size)
        ]
        if not found:
            return np.zeros((0,), "float32")
        return np.concatenate([f["probabilities"][:, 1].numpy() for f in found])
