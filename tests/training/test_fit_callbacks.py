"""`CheckpointAveraging` and `BleuEarlyStopping` in a plain `model.fit`."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest

from keras_transformer.data import SubwordTokenizer, synthetic_dates
from keras_transformer.losses import MaskedSparseCrossEntropy
from keras_transformer.optimizers import Adam
from keras_transformer.training import (
    BleuEarlyStopping,
    CheckpointAveraging,
    fit_callbacks,
)
from tests.export_helpers import fit_arrays, tiny_model


@functools.cache
def _dates() -> tuple[SubwordTokenizer, tuple[np.ndarray, np.ndarray], np.ndarray]:
    """A tokenizer and the fit arrays of 100 synthetic dates."""
    pairs = synthetic_dates(100, seed=0)
    tokenizer = SubwordTokenizer.train(
        [*pairs.sources, *pairs.targets], vocabulary_size=120
    )
    return tokenizer, *fit_arrays(tokenizer, pairs)


class _Snapshots(keras.callbacks.Callback):
    """The weights (and the logs) at the end of each epoch."""

    def __init__(self) -> None:
        super().__init__()
        self.weights: list[list[np.ndarray]] = []
        self.logs: list[dict[str, Any]] = []

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self.weights.append([np.array(w) for w in self.model.get_weights()])
        self.logs.append(dict(logs or {}))


def _fit(model: keras.Model, epochs: int, callbacks: list[Any]) -> Any:
    _, inputs, labels = _dates()
    return model.fit(
        inputs, labels, batch_size=50, epochs=epochs, verbose=0, callbacks=callbacks
    )


def test_checkpoint_averaging_sets_the_mean_of_the_last_epochs(
    tmp_path: Path,
) -> None:
    tokenizer, _, _ = _dates()
    model = tiny_model(tokenizer, jit_compile=False)
    snapshots = _Snapshots()
    in_memory = CheckpointAveraging(last_n=3, apply_on_train_end=False)
    on_disk = CheckpointAveraging(last_n=3, directory=tmp_path / "avg")
    # `on_disk` comes last: it sets the model to the mean when fit ends.
    _fit(model, 5, [snapshots, in_memory, on_disk])
    assert in_memory.count == on_disk.count == 3
    expected = [
        np.mean(np.stack([s[i] for s in snapshots.weights[-3:]]), axis=0)
        for i in range(len(snapshots.weights[0]))
    ]
    for got, kept, want in zip(
        model.get_weights(), in_memory.average(), expected, strict=True
    ):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(kept, want, rtol=1e-6, atol=1e-7)
    # The mean differs from the last epoch's weights (they moved).
    assert any(
        not np.allclose(got, last)
        for got, last in zip(model.get_weights(), snapshots.weights[-1], strict=True)
    )
    # Only the last 3 epochs' files are kept.
    names = sorted(p.name for p in (tmp_path / "avg").iterdir())
    assert names == [f"epoch-{n:04d}.weights.h5" for n in (3, 4, 5)]


def test_checkpoint_averaging_without_an_epoch_says_so() -> None:
    with pytest.raises(ValueError, match="no snapshot yet"):
        CheckpointAveraging(last_n=2).average()
    with pytest.raises(ValueError, match="last_n"):
        CheckpointAveraging(last_n=0)


@pytest.mark.slow  # trains tests.export_helpers' tiny model (~25 s) unless cached
def test_bleu_early_stopping_logs_the_translator_bleu() -> None:
    import sacrebleu

    from keras_transformer.translation import translate_lines
    from tests.export_helpers import tiny_translator

    trained, tokenizer = tiny_translator()  # shared: fit a copy of it
    model = keras.models.clone_model(trained)
    model.set_weights(trained.get_weights())
    model.compile(
        optimizer=Adam(1e-3),
        loss=MaskedSparseCrossEntropy(label_smoothing=0.0),
        jit_compile=False,
    )
    model.optimizer.build(model.trainable_variables)  # as `tiny_model` does
    held_out = synthetic_dates(12, seed=5)
    stopping = BleuEarlyStopping(
        held_out.sources, held_out.targets, tokenizer, patience=10
    )
    snapshots = _Snapshots()
    pairs = synthetic_dates(100, seed=3)
    features, labels = fit_arrays(tokenizer, pairs)
    history = model.fit(
        features,
        labels,
        batch_size=50,
        epochs=2,
        verbose=0,
        callbacks=[stopping, snapshots],
    )
    assert history.history["val_bleu"] == stopping.scores
    assert len(stopping.scores) == 2
    assert min(stopping.scores) > 0.0  # date-like outputs: the BLEU is not trivial
    for weights, logs in zip(snapshots.weights, snapshots.logs, strict=True):
        model.set_weights(weights)
        hypotheses = translate_lines(model, tokenizer, held_out.sources, beam_size=1)
        bleu = sacrebleu.corpus_bleu(hypotheses, [held_out.targets]).score
        assert logs["val_bleu"] == pytest.approx(bleu, abs=1e-9)


def test_bleu_early_stopping_stops_after_patience_and_restores_the_best(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tokenizer, _, _ = _dates()
    held_out = synthetic_dates(4, seed=5)
    # Epoch 2 is the best; epochs 3, 4 do not improve: patience 2 stops at 4.
    scores = iter([10.0, 20.0, 19.0, 20.0, 30.0, 40.0])
    monkeypatch.setattr(
        fit_callbacks.BleuEarlyStopping, "score", lambda self: next(scores)
    )
    model = tiny_model(tokenizer, jit_compile=False)
    stopping = BleuEarlyStopping(
        held_out.sources, held_out.targets, tokenizer, patience=2
    )
    snapshots = _Snapshots()
    history = _fit(model, 6, [stopping, snapshots])  # 2 updates an epoch
    assert history.history["val_bleu"] == [10.0, 20.0, 19.0, 20.0]
    assert stopping.stopped_epoch == 3  # the 4th epoch (from 0)
    assert stopping.best_epoch == 1
    for got, best in zip(model.get_weights(), snapshots.weights[1], strict=True):
        np.testing.assert_array_equal(got, best)


def test_bleu_early_stopping_refuses_bad_arguments() -> None:
    tokenizer, _, _ = _dates()
    with pytest.raises(ValueError, match="2 sources but 1 references"):
        BleuEarlyStopping(["a", "b"], ["x"], tokenizer)
    with pytest.raises(ValueError, match="at least one validation sentence"):
        BleuEarlyStopping([], [], tokenizer)
    with pytest.raises(TypeError, match="lists of sentences"):
        BleuEarlyStopping("a", ["x"], tokenizer)
    with pytest.raises(ValueError, match="patience must be an integer"):
        BleuEarlyStopping(["a"], ["x"], tokenizer, patience=-1)
    # An empty pair would be scored at every epoch's end: refused before fit.
    with pytest.raises(ValueError, match=r"^reference 2 \(counting from 1\) is empty"):
        BleuEarlyStopping(["a", "b"], ["x", " "], tokenizer)
