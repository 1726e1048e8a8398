"""Decoding speed: KV-cached vs uncached greedy, beam vs greedy, vs keras-hub.

On one randomly initialised model (d_model 256, 8 heads, d_ff 1024, 3 + 3
layers, vocabulary 8000, the "small" preset without dropout) and a batch of
random sources, it measures target tokens per second (batch * output length
/ seconds) of:

* cached greedy (`kt.decoding`, graph and XLA) vs the uncached baseline that
  re-runs the decoder on the whole prefix every step
  (`Decoder(model, use_cache=False)`), at output lengths 16, 64 and 128;
* beam search (beam 4) vs greedy at length 64, and vs greedy on the same
  number of rows (batch * 4): the second ratio is what the search itself
  costs beyond decoding 4x the rows. The ratio of their multiply-adds per
  step (`step_multiply_adds`) is printed next to them: where the batch is
  large enough to keep the cores busy, time follows arithmetic;
* cached greedy vs keras-hub: an encoder-decoder of the same sizes built from
  `keras_hub.layers.TransformerEncoder` / `TransformerDecoder` with their
  self- and cross-attention caches, driven by `keras_hub.samplers.
  GreedySampler` (the way keras-hub's BART seq2seq LM generates), at 64 and
  128.

Every decoder runs exactly `length` steps (no END token: `end_id=None`, or no
stop token for keras-hub). After one call of every case that traces /
compiles it ("first s"), `--repeats` rounds run every case once, interleaved
so that a busy machine slows all of them alike; "best s" is the best round.

Usage:
    python benchmarks/decode.py            # full run (a few minutes on 2 cores)
    python benchmarks/decode.py --quick    # small smoke run
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.get_logger().setLevel("ERROR")  # every length is a new trace, on purpose

from keras_transformer.decoding import Decoder, DecodeSettings  # noqa: E402
from keras_transformer.models import (  # noqa: E402
    TransformerConfig,
    build_transformer,
    presets,
)

START_ID = 2


# ------------------------------------------------------------------ keras-hub
class KerasHubSeq2Seq:
    """The same encoder-decoder built from keras-hub layers, with its caches.

    Greedy generation follows keras-hub's seq2seq models: the encoder runs
    once, a first decoder call fills the cross-attention caches, then
    `GreedySampler` feeds one token per step, updating the self-attention
    cache of every `TransformerDecoder` at the step's index.
    """

    def __init__(
        self,
        vocabulary_size: int,
        d_model: int,
        num_heads: int,
        d_ff: int,
        num_layers: int,
    ) -> None:
        self.num_heads, self.head_dim = num_heads, d_model // num_heads
        self.embedding = keras_hub.layers.ReversibleEmbedding(vocabulary_size, d_model)
        self.position = keras_hub.layers.SinePositionEncoding()
        self.encoders = [
            keras_hub.layers.TransformerEncoder(d_ff, num_heads)
            for _ in range(num_layers)
        ]
        self.decoders = [
            keras_hub.layers.TransformerDecoder(d_ff, num_heads)
            for _ in range(num_layers)
        ]
        self.sampler = keras_hub.samplers.GreedySampler()
        self._compiled = {
            jit: tf.function(self._generate, jit_compile=jit, reduce_retracing=True)
            for jit in (False, True)
        }

    def generate(
        self, source_ids: np.ndarray, length: int, jit_compile: bool
    ) -> tf.Tensor:
        """Greedy outputs `(batch, 1 + length)` (START, then `length` tokens)."""
        return self._compiled[jit_compile](tf.constant(source_ids), length)

    def _embed(
        self, token_ids: tf.Tensor, start_index: tf.Tensor | int = 0
    ) -> tf.Tensor:
        hidden = self.embedding(token_ids)
        return hidden + self.position(hidden, start_index=start_index)

    def _decode(self, token_ids, index, self_caches, cross_caches, encoded, mask):
        """One cached step of the decoder stack; `cross_caches` may be filled."""
        hidden = self._embed(token_ids, index)
        new_self, new_cross = [], []
        fill_cross = cross_caches is None
        for i, layer in enumerate(self.decoders):
            cross = self._empty_cross(encoded) if fill_cross else cross_caches[:, i]
            hidden, self_cache, cross = layer(
                hidden,
                encoder_sequence=encoded,
                encoder_padding_mask=mask,
                self_attention_cache=self_caches[:, i],
                self_attention_cache_update_index=index,
                cross_attention_cache=cross,
                cross_attention_cache_update_index=0 if fill_cross else None,
            )
            new_self.append(self_cache)
            new_cross.append(cross)
        logits = self.embedding(hidden, reverse=True)
        return logits, tf.stack(new_self, 1), tf.stack(new_cross, 1)

    def _empty_cross(self, encoded: tf.Tensor) -> tf.Tensor:
        batch, length = tf.shape(encoded)[0], tf.shape(encoded)[1]
        return tf.zeros([batch, 2, length, self.num_heads, self.head_dim])

    def _generate(self, source_ids: tf.Tensor, length: int) -> tf.Tensor:
        mask = source_ids != 0
        encoded = self._embed(source_ids)
        for layer in self.encoders:
            encoded = layer(encoded, padding_mask=mask)
        batch = tf.shape(source_ids)[0]
        self_caches = tf.zeros(
            [batch, len(self.decoders), 2, length, self.num_heads, self.head_dim]
        )
        prompt = tf.concat(
            [tf.fill([batch, 1], START_ID), tf.zeros([batch, length], tf.int32)], 1
        )
        # Fill the cross-attention caches (and position 0) once.
        _, self_caches, cross_caches = self._decode(
            prompt[:, :1], 0, self_caches, None, encoded, mask
        )

        def next_token(prompt, cache, index):
            self_caches, cross_caches = cache
            logits, self_caches, _ = self._decode(
                prompt[:, index - 1][:, None],
                index - 1,
                self_caches,
                cross_caches,
                encoded,
                mask,
            )
            return logits[:, 0], None, (self_caches, cross_caches)

        return self.sampler(
            next_token,
            prompt,
            cache=(self_caches, cross_caches),
            index=1,
            mask=tf.one_hot(tf.zeros([batch], tf.int32), length + 1) > 0,
        )


# ---------------------------------------------------------------- benchmark
def step_multiply_adds(
    config: TransformerConfig, source_length: int, cache_length: int, beam: int | None
) -> int:
    """Multiply-adds of one decoding step for one example (§3.2-3.3).

    Greedy runs one decoder row per example; beam search runs `beam` rows, and
    each of its queries is scored against the cached slots of all `beam`
    hypotheses (`cache_length * beam` keys, masked to its own past). Both
    count the static caches of `cache_length` positions that XLA decodes with.
    The cross-attention keys and values are computed once, before the loop.
    """
    d_model, d_ff = config.d_model, config.d_ff
    rows = beam or 1
    attended = cache_length * rows
    per_row_and_layer = (
        4 * d_model * d_model  # self-attention Q, K, V and output projections
        + 2 * attended * d_model  # scores and weighted values over the cache
        + 2 * d_model * d_model  # cross-attention Q and output projections
        + 2 * source_length * d_model  # cross-attention over the source
        + 2 * d_model * d_ff  # the feed-forward network (Eq. 2)
    )
    output_layer = d_model * config.vocabulary_size
    return rows * (config.num_decoder_layers * per_row_and_layer + output_layer)


def timed(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small smoke run")
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--source-length", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args()

    if args.quick:
        config = presets["tiny"].replace(dropout=0.0)
        lengths, beam_length, batch, repeats = (8, 16, 32), 16, 4, 2
    else:
        config = presets["small"].replace(dropout=0.0)
        lengths, beam_length, batch, repeats = (16, 64, 128), 64, 16, 5
    batch = args.batch or batch
    repeats = args.repeats or repeats
    hub_lengths = (beam_length, lengths[-1])

    keras.utils.set_random_seed(0)
    model = build_transformer(config)
    sources = np.random.default_rng(0).integers(
        4, config.vocabulary_size, size=(batch, args.source_length), dtype="int32"
    )
    decoders = {"graph": Decoder(model), "xla": Decoder(model, jit_compile=True)}
    hub = KerasHubSeq2Seq(
        config.vocabulary_size,
        config.d_model,
        config.num_heads,
        config.d_ff,
        config.num_decoder_layers,
    )

    print(
        f"model: d_model={config.d_model} heads={config.num_heads} "
        f"d_ff={config.d_ff} layers={config.num_encoder_layers}+"
        f"{config.num_decoder_layers} vocabulary={config.vocabulary_size} "
        f"({model.count_params() / 1e6:.1f}M parameters); batch={batch}, "
        f"source length={args.source_length}; best of {repeats} interleaved rounds"
    )
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPU cores, "
        f"TensorFlow {tf.__version__}, Keras {keras.__version__}, "
        f"keras-hub {keras_hub.__version__}; load average "
        f"{os.getloadavg()[0]:.1f} at the start"
    )
    cases: dict[tuple[str, str, int], Callable[[], object]] = {}
    # Every output runs to its maximum length: no END, a large allowance.
    greedy = DecodeSettings(method="greedy", extra_length=10_000)
    beam = DecodeSettings(method="beam", beam_size=4, extra_length=10_000)
    reference = Decoder(model, use_cache=False)
    for length in lengths:
        for mode, decoder in decoders.items():
            cases["greedy (cached)", mode, length] = lambda d=decoder, n=length: (
                d.decode(sources, greedy, max_length=n, end_id=None)
            )
        cases["greedy (uncached)", "graph", length] = lambda n=length: reference.decode(
            sources, greedy, max_length=n, end_id=None
        )
    beam_rows = np.repeat(sources, 4, axis=0)
    for mode, decoder in decoders.items():
        cases["beam 4 (cached)", mode, beam_length] = lambda d=decoder: d.decode(
            sources, beam, max_length=beam_length, end_id=None
        )
        cases["greedy, batch x 4", mode, beam_length] = lambda d=decoder: d.decode(
            beam_rows, greedy, max_length=beam_length, end_id=None
        )
    for length in hub_lengths:
        for mode in decoders:
            key = ("keras-hub greedy (cached)", mode, length)
            cases[key] = lambda m=mode, n=length: hub.generate(sources, n, m == "xla")

    # A first call of every case traces / compiles; then the timed rounds run
    # every case once per round (interleaved, so that a busy machine slows
    # all cases alike) and the best round of each case counts.
    first = {key: timed(run) for key, run in cases.items()}
    rounds: dict[tuple[str, str, int], list[float]] = {key: [] for key in cases}
    for _ in range(repeats):
        for key, run in cases.items():
            rounds[key].append(timed(run))
    results = {key: min(times) for key, times in rounds.items()}

    header = f"{'decoder':<26}{'mode':<7}{'length':>7}{'first s':>9}{'best s':>9}"
    print()
    print(header + f"{'tokens/s':>10}")
    print("-" * (len(header) + 10))
    for (name, mode, length), best in results.items():
        print(
            f"{name:<26}{mode:<7}{length:>7}{first[name, mode, length]:>9.2f}"
            f"{best:>9.3f}{batch * length / best:>10.0f}"
        )

    print("\nratios (time of the slower / time of the faster):")
    for length in lengths:
        uncached = results["greedy (uncached)", "graph", length]
        print(
            f"  cached vs uncached greedy, length {length:>3}: "
            f"graph {uncached / results['greedy (cached)', 'graph', length]:5.1f}x"
            f", xla {uncached / results['greedy (cached)', 'xla', length]:5.1f}x"
        )
    for mode in decoders:
        beam = results["beam 4 (cached)", mode, beam_length]
        greedy = results["greedy (cached)", mode, beam_length]
        same_rows = results["greedy, batch x 4", mode, beam_length]
        print(
            f"  beam 4 cost / greedy cost, length {beam_length}, {mode}: "
            f"{beam / greedy:.2f}x (greedy on batch x 4: {same_rows / greedy:.2f}x;"
            f" beam 4 / greedy on the same rows: {beam / same_rows:.2f}x)"
        )
    # Under XLA the caches hold `max_length` positions (the benchmark passes
    # it, and it is shorter than the source + `extra_length`).
    cache_length = beam_length
    arithmetic = step_multiply_adds(
        config, args.source_length, cache_length, 4
    ) / step_multiply_adds(config, args.source_length, cache_length, None)
    print(
        f"  beam 4 / greedy multiply-adds per step (static caches of "
        f"{cache_length}): {arithmetic:.2f}x"
    )
    for length in hub_lengths:
        for mode in decoders:
            ours = results["greedy (cached)", mode, length]
            theirs = results["keras-hub greedy (cached)", mode, length]
            print(
                f"  kt greedy speed-up over keras-hub, length {length}, {mode}: "
                f"{theirs / ours:.2f}x"
            )
        best_ours = min(results["greedy (cached)", m, length] for m in decoders)
        best_theirs = min(
            results["keras-hub greedy (cached)", m, length] for m in decoders
        )
        print(
            f"  kt greedy speed-up over keras-hub, length {length}, best mode of "
            f"each: {best_theirs / best_ours:.2f}x"
        )

    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
