# %% [markdown]
# # What the heads attend to
#
# The paper ends with three figures of attention weights (Figures 3-5, in
# the appendix "Attention Visualizations"): a head of layer 5 that links the
# verb *making* to the distant *more difficult*, two heads that resolve the
# anaphora *its*, and heads whose patterns "seem related to the structure of
# the sentence". This notebook draws the same kind of pictures for models
# trained here, with `keras_transformer.visualize`:
#
# * `attention_maps(model, source_ids, target_ids)`: every attention weight
#   of a `build_transformer` model, per layer and head, for the encoder
#   self-attention, the (masked) decoder self-attention and the
#   encoder-decoder attention;
# * `plot_attention` and `plot_heads`: labelled heat maps.
#
# Two models are used: one trained on synthetic dates (a minute or two;
# the alignments are crisp), and a German→English Multi30k model for the
# sentence-level examples (the run of `02_translation.ipynb` when it exists,
# otherwise a short run made here). With `FAST=1` both are trained for a
# few steps only, so the pictures are those of barely trained models.

# %%
# %matplotlib inline
import os
import warnings
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import matplotlib.pyplot as plt
import numpy as np
import tensorflow as tf
from IPython.display import display

import keras_transformer as kt
from keras_transformer import decoding, training, visualize

FAST = os.environ.get("FAST") == "1"
tf.get_logger().setLevel("ERROR")  # no INFO lines from tf.distribute, tracing
# A one-token output makes Keras warn about a softmax over a single key.
warnings.filterwarnings("ignore", message="You are using a softmax over axis")
shared = Path("../../shared/data").resolve()
if "KT_DATA_DIR" not in os.environ and shared.is_dir():
    os.environ["KT_DATA_DIR"] = str(shared)
RUNS = Path(os.environ.get("KT_WORKDIR", "runs"))
print("FAST:", FAST, "| runs in", RUNS)

# %% [markdown]
# ## 1. A model that reads dates
#
# `kt.data.synthetic_dates` writes random dates in six languages and several
# styles ("Donnerstag, 5. Januar 2023", "January 5, 2023", "5 janv. 2023")
# and asks for the ISO form "2023-01-05". The output order (year, month,
# day) differs from most input orders, so the decoder has to look back and
# forth: a small, checkable case of the long-distance dependencies of
# Figure 3.

# %%
dates_config = training.TrainConfig(
    model={
        "preset": "tiny",
        "max_length": 32,
        "optimizer": {"warmup_steps": 60 if FAST else 400},
    },
    data=training.DataConfig(
        task="dates",
        num_train_examples=5_000 if FAST else 50_000,
        num_eval_examples=50 if FAST else 500,
        vocabulary_size=500,
        max_sentence_length=32,
        max_tokens_per_batch=2048,
        bucket_boundaries=(8, 12, 16, 24, 32),
    ),
    train=training.TrainingConfig(
        train_steps=60 if FAST else 1500,
        steps_per_epoch=60 if FAST else 500,
        bleu_samples=16 if FAST else 200,
        test_samples=50 if FAST else 500,
        num_translations=0,
        verbose=0,
    ),
)
dates_dir = RUNS / ("attention_dates_fast" if FAST else "attention_dates")
dates = training.train(dates_config, dates_dir)  # prints its evaluation
dates_model, dates_tokenizer = dates.model, dates.tokenizer

# %%


def maps_of_translation(model, tokenizer, sentence: str, max_length: int = 32):
    """Translates `sentence` and returns the attention maps and the labels.

    The decoder is fed the start token and the model's own output, so row
    `i` of a decoder map is the step that produced output token `i`.
    """
    source_ids = [*tokenizer.encode([sentence])[0], tokenizer.END_ID]
    found = decoding.Decoder(model).decode(
        np.array([source_ids]), max_length=max_length
    )
    output_ids = found.to_list()[0]
    target_ids = [tokenizer.START_ID, *output_ids[:-1]]
    maps = visualize.attention_maps(
        model, np.array([source_ids]), np.array([target_ids])
    )
    return (
        maps,
        [tokenizer.id_to_piece(i) for i in source_ids],
        [tokenizer.id_to_piece(i) for i in output_ids],
        tokenizer.decode([output_ids])[0],
    )


sentences = ["Donnerstag, 5. Januar 2023", "January 5, 2023", "5 janv. 2023"]
fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
for ax, sentence in zip(axes, sentences, strict=True):
    maps, source_pieces, output_pieces, text = maps_of_translation(
        dates_model, dates_tokenizer, sentence
    )
    # The last decoder layer's encoder-decoder attention, averaged over heads.
    weights = maps["encoder_decoder"][-1, 0].mean(axis=0)
    visualize.plot_attention(weights, source_pieces, output_pieces, ax=ax)
    ax.set_title(f"{sentence}\n-> {text}", fontsize="medium")
fig.tight_layout()
plt.show()

# %% [markdown]
# Each row is one output token, each column a source subword. In a trained
# model the year digits look at the year, the month digits at the month
# name, the day at the day, whatever the order of the source: the first
# outputs (the year) depend on the *last* source tokens in all three
# examples, and "January 5" is read backwards.
#
# Each head of that layer on its own:

# %%
maps, source_pieces, output_pieces, text = maps_of_translation(
    dates_model, dates_tokenizer, sentences[1]
)
display(visualize.plot_heads(maps, -1, "encoder_decoder", source_pieces, output_pieces))

# %% [markdown]
# ## 2. Which heads attend where
#
# Figure 5 of the paper shows heads that "clearly learned to perform
# different tasks". Averaged over many sentences, simple statistics of each
# encoder self-attention head make their roles visible:
#
# * the **mean distance** $\sum_j w_{ij} |i - j|$ between a token and the
#   tokens it attends to (a local head has a small one), and
# * the **entropy** $-\sum_j w_{ij} \log w_{ij}$ of its weights (a head
#   that picks one token has a low one, a head that averages a high one).

# %%


def head_statistics(model, tokenizer, sentences: list[str]):
    """Mean attention distance and entropy of every encoder head."""
    batch = kt.data.batch_for_eval(
        kt.data.TextPairs(tuple(sentences), tuple(sentences)),
        tokenizer,
        batch_size=len(sentences),
        max_length=64,
    )
    source_ids, _ = next(batch.as_numpy_iterator())
    # Only the encoder matters here: the decoder gets just the start token.
    start = np.full((len(source_ids), 1), tokenizer.START_ID)
    maps = visualize.attention_maps(model, source_ids, start)
    weights = maps["encoder_self"]  # (layers, batch, heads, query, key)
    real = source_ids != 0
    length = source_ids.shape[1]
    distance = np.abs(np.arange(length)[:, None] - np.arange(length)[None, :])
    mean_distance = (weights * distance).sum(-1)
    entropy = -(weights * np.log(np.clip(weights, 1e-9, 1.0))).sum(-1)
    # Average over the real query positions of every sentence.
    mask = real[None, :, None, :]
    return (
        (mean_distance * mask).sum((1, 3)) / mask.sum((1, 3)),
        (entropy * mask).sum((1, 3)) / mask.sum((1, 3)),
    )


validation_dates = kt.data.synthetic_dates(200, seed=7)
distance, entropy = head_statistics(
    dates_model, dates_tokenizer, list(validation_dates.sources)
)
fig, axes = plt.subplots(1, 2, figsize=(10, 2.8))
panels = [(distance, "mean distance (tokens)"), (entropy, "entropy (nats)")]
for ax, (values, title) in zip(axes, panels, strict=True):
    image = ax.imshow(values, cmap="viridis")
    ax.set(xlabel="head", ylabel="layer", title=title)
    ax.set_xticks(range(values.shape[1]))
    ax.set_yticks(range(values.shape[0]))
    for (layer, head), value in np.ndenumerate(values):
        ax.text(head, layer, f"{value:.1f}", ha="center", va="center", color="w")
    fig.colorbar(image, ax=ax)
plt.show()

# %% [markdown]
# ## 3. Sentences: a long-distance dependency and an anaphora
#
# For the examples of Figures 3 and 4 we need a model of real sentences.
# German has long-distance dependencies of its own: in "Ein Mann fährt mit
# seinem Fahrrad die Straße entlang", the verb *fährt* and its particle
# *entlang* ("rides along") frame the whole sentence; and in "Eine Frau hält
# ihr Baby, während sie lacht", *ihr* and *sie* refer back to *Frau*.
#
# The model: the run of `02_translation.ipynb` if it is there, otherwise a
# shorter run of the same model made here (1,000 updates, about 15 minutes
# on two CPU cores; with `FAST=1`, 10 updates). Its attention will be less
# tidy than that of a model trained for longer.

# %%
translation_dir = RUNS / ("translation_fast" if FAST else "translation")
if list((translation_dir / "checkpoints").glob("ckpt-*.index")):
    print("reusing", translation_dir)
    model, tokenizer, _ = training.load_trained_model(translation_dir)
else:
    config = training.TrainConfig(
        model={
            "preset": "small",
            "d_model": 128,
            "d_ff": 512,
            "num_heads": 4,
            "max_length": 64,
            "optimizer": {"warmup_steps": 10 if FAST else 1000},
        },
        data=training.DataConfig(
            task="multi30k",
            vocabulary_size=1000 if FAST else 8000,
            tokenizer_max_sentences=10_000 if FAST else None,
            max_sentence_length=64,
        ),
        train=training.TrainingConfig(
            train_steps=10 if FAST else 1000,
            steps_per_epoch=10 if FAST else 500,
            bleu_samples=8 if FAST else 100,
            test_samples=8 if FAST else 200,
            num_translations=0,
            verbose=0,
        ),
    )
    run = training.train(
        config, RUNS / ("attention_de_en_fast" if FAST else "attention_de_en")
    )
    model, tokenizer = run.model, run.tokenizer
    print(run.evaluation.summary())

# %%


def plot_query(maps, pieces: list[str], word: str, layer: int = -1):
    """The encoder self-attention of the first subword of `word`, every head."""
    query = next(i for i, piece in enumerate(pieces) if word in piece)
    weights = maps["encoder_self"][layer, 0, :, query, : len(pieces)]
    fig, ax = plt.subplots(figsize=(0.5 * len(pieces) + 2, 0.4 * len(weights) + 1.2))
    visualize.plot_attention(
        weights, pieces, [f"head {h}" for h in range(len(weights))], ax=ax
    )
    number = layer % maps["encoder_self"].shape[0]
    ax.set_title(f"encoder self-attention of '{pieces[query]}', layer {number}")
    plt.show()


examples = {
    "Ein Mann fährt mit seinem Fahrrad die Straße entlang.": ["fährt", "entlang"],
    "Eine Frau hält ihr Baby, während sie lacht.": ["ihr", "sie"],
}
for sentence, words in examples.items():
    maps, source_pieces, output_pieces, text = maps_of_translation(
        model, tokenizer, sentence, max_length=64
    )
    print(f"{sentence}\n  -> {text}")
    for word in words:
        plot_query(maps, source_pieces, word)

# %% [markdown]
# Each row is one head of the last encoder layer, each column a source
# subword; the weights are those of the query word named in the title. In
# the paper's fully trained 6-layer model some heads single out the
# partner word (*making* → *more difficult*, *its* → *Law*, *application*).
# Small models trained for minutes show such heads less often; the same
# plots on a longer run (`02_translation.ipynb` with more updates, or the
# `base` preset) are the way to look for them.
#
# The complete picture of one layer, every head, for the first sentence:

# %%
sentence = next(iter(examples))
maps, source_pieces, output_pieces, _ = maps_of_translation(
    model, tokenizer, sentence, max_length=64
)
display(visualize.plot_heads(maps, -1, "encoder_self", source_pieces, source_pieces))
