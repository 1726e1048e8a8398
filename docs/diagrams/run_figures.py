#!/usr/bin/env python3
"""Pictures of a trained translation run for the docs.

Reads a run folder written by ``keras-transformer train`` (or by
``examples/02_translation.ipynb``) and writes

* ``docs/images/multi30k_curves.png``: training loss, validation BLEU and the
  learning rate of Eq. 7 against the wall time of training, read back from
  the run's TensorBoard logs (``<run>/logs/train`` and ``<run>/logs/validation``);
* ``docs/images/attention_sentence.png``: the encoder-decoder attention of
  every head of the last decoder layer (Figures 4-5 of the paper) while the
  run's model translates one sentence of the validation split with beam
  search (§6.1); the decoder is fed its own output, so row ``i`` is the step
  that produced output token ``i``.

Usage (from the repository root)::

    .venv/bin/python docs/diagrams/run_figures.py --workdir runs/translation
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

IMAGES = Path(__file__).resolve().parents[1] / "images"
#: A sentence of Multi30k's validation split.
SENTENCE = "Ein Junge mit Kopfhörern sitzt auf den Schultern einer Frau."


def scalar_series(
    log_dir: Path, tag: str
) -> tuple[list[float], list[int], list[float]]:
    """(wall times, steps, values) of `tag` in the event files of `log_dir`."""
    import tensorflow as tf
    from tensorboard.backend.event_processing import event_accumulator

    accumulator = event_accumulator.EventAccumulator(
        str(log_dir), size_guidance={event_accumulator.TENSORS: 0}
    )
    accumulator.Reload()
    if tag not in accumulator.Tags()["tensors"]:
        raise SystemExit(f"{log_dir} has no scalar {tag!r}: is it a run's log folder?")
    events = accumulator.Tensors(tag)
    return (
        [event.wall_time for event in events],
        [event.step for event in events],
        [float(tf.make_ndarray(event.tensor_proto)) for event in events],
    )


def plot_curves(run: Path, output: Path) -> None:
    """Training loss, validation BLEU and learning rate against minutes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train_times, train_steps, losses = scalar_series(run / "logs" / "train", "loss")
    _, _, rates = scalar_series(run / "logs" / "train", "learning_rate")
    bleu_times, bleu_steps, bleus = scalar_series(run / "logs" / "validation", "bleu")
    start = min(train_times[0], bleu_times[0])

    def minutes(times: list[float]) -> list[float]:
        return [(t - start) / 60 for t in times]

    figure, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    axes[0].plot(minutes(train_times), losses)
    axes[0].set(title="training loss (label-smoothed)", xlabel="minutes", ylabel="nats")
    axes[1].plot(minutes(bleu_times), bleus, marker="o")
    for time, step, bleu in zip(minutes(bleu_times), bleu_steps, bleus, strict=True):
        axes[1].annotate(
            f"{step}",
            (time, bleu),
            fontsize=7,
            xytext=(2, -10),
            textcoords="offset points",
        )
    axes[1].set(title="validation BLEU (greedy; update number)", xlabel="minutes")
    axes[2].plot(train_steps, rates)
    axes[2].set(title="learning rate (Eq. 7)", xlabel="update")
    for ax in axes:
        ax.grid(alpha=0.3)
    figure.suptitle(f"{run.name}: {train_steps[-1]} updates", fontsize=10)
    figure.tight_layout()
    figure.savefig(output, dpi=110)
    print("wrote", output)


def plot_attention(run: Path, output: Path, sentence: str) -> None:
    """Every head of the last decoder layer's encoder-decoder attention."""
    import numpy as np

    from keras_transformer import decoding, visualize
    from keras_transformer.data.batching import encode_sources
    from keras_transformer.training import load_trained_model

    model, tokenizer, config = load_trained_model(run)
    source_ids = encode_sources(tokenizer, [sentence], config.model.max_length)
    source_ids = source_ids.to_tensor().numpy()
    settings = decoding.DecodeSettings()  # beam 4, alpha 0.6 (§6.1)
    found = decoding.Decoder(model).decode(source_ids, settings, max_length=40)
    output_ids = found.to_list()[0]
    target_ids = [tokenizer.START_ID, *output_ids[:-1]]
    maps = visualize.attention_maps(model, source_ids, np.array([target_ids]))
    source_ids = source_ids[0]
    figure = visualize.plot_heads(
        maps,
        layer=-1,
        kind="encoder_decoder",
        x_labels=[tokenizer.id_to_piece(int(i)) for i in source_ids],
        y_labels=[tokenizer.id_to_piece(int(i)) for i in output_ids],
    )
    figure.suptitle(f"{sentence}  →  {tokenizer.decode([output_ids])[0]}", fontsize=10)
    figure.savefig(output, dpi=100, bbox_inches="tight")
    print("wrote", output, "|", tokenizer.decode([output_ids])[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, required=True, help="A run folder.")
    parser.add_argument("--sentence", default=SENTENCE, help="German source sentence.")
    args = parser.parse_args(argv)
    if not (args.workdir / "config.json").is_file():
        parser.error(f"{args.workdir} is not a run folder (it has no config.json)")
    plot_curves(args.workdir, IMAGES / "multi30k_curves.png")
    plot_attention(args.workdir, IMAGES / "attention_sentence.png", args.sentence)
    return 0


if __name__ == "__main__":
    sys.exit(main())
