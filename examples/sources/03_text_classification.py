# %% [markdown]
# # Text classification with the encoder: IMDB sentiment
#
# The Transformer's encoder is a general sequence reader: stack the layers of
# §3.1 on top of token embeddings, average the outputs over the positions,
# and a single logistic unit on top classifies the whole text. This notebook
# trains such a model on the IMDB movie reviews (Maas et al., 2011): 25,000
# reviews for training, 25,000 for testing, half of them positive.
#
# It also asks a question the paper answers in §3.5: "Since our model
# contains no recurrence and no convolution, in order for the model to make
# use of the order of the sequence, we must inject some information about
# the relative or absolute position of the tokens". We train the same model
# **with** the sinusoidal encodings of Eqs. 5-6 and **without** any position
# information, and compare.
#
# The full run takes about 16 minutes on two (shared) CPU cores and reaches
# a test accuracy of about 0.88 with either model; `FAST=1` trains on a
# small sample for a smoke test.

# %%
# %matplotlib inline
import os
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import matplotlib.pyplot as plt
import numpy as np
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.data.imdb import load_imdb

FAST = os.environ.get("FAST") == "1"
keras.utils.set_random_seed(0)

# $KT_DATA_DIR/imdb when set, else a download (once) into
# ~/.cache/keras_transformer; a development checkout has a shared copy.
shared = Path("../../shared/data").resolve()
if "KT_DATA_DIR" not in os.environ and shared.is_dir():
    os.environ["KT_DATA_DIR"] = str(shared)
print("FAST:", FAST, "| data:", os.environ.get("KT_DATA_DIR", "download"))

# %% [markdown]
# ## 1. The reviews
#
# `load_imdb` returns the texts (with the `<br />` tags of the original files
# replaced by spaces) and 0/1 labels. The files are sorted by label, so the
# training reviews are shuffled before anything else; 1,000 of them (4%) are
# kept apart for validation.

# %%
train_texts, train_labels = load_imdb("train")
test_texts, test_labels = load_imdb("test")
order = np.random.default_rng(0).permutation(len(train_texts))
train_texts = [train_texts[i].lower() for i in order]
train_labels = train_labels[order]
test_texts = [text.lower() for text in test_texts]

if FAST:  # a balanced sample of each split
    train_texts, train_labels = train_texts[:2000], train_labels[:2000]
    keep = np.r_[0:500, 12500:13000]
    test_texts, test_labels = [test_texts[i] for i in keep], test_labels[keep]

VALIDATION = len(train_texts) // 25
validation_texts, validation_labels = (
    train_texts[:VALIDATION],
    train_labels[:VALIDATION],
)
train_texts, train_labels = train_texts[VALIDATION:], train_labels[VALIDATION:]
print(f"{len(train_texts)} training, {VALIDATION} validation, {len(test_texts)} test")
print(f"positive share in training: {train_labels.mean():.3f}")
print(train_texts[0][:300], "...")

# %% [markdown]
# ## 2. Subword tokens
#
# A SentencePiece vocabulary of 8,000 pieces learned on the (lower-cased)
# training reviews, the same `SubwordTokenizer` the translation models use.
# Reviews are long: we keep at most `MAX_LENGTH` tokens, the first 384 and
# the last 128 of a longer review (the end of a review often sums it up).

# %%
VOCABULARY = 2000 if FAST else 8000
MAX_LENGTH, TAIL = 512, 128

start = time.perf_counter()
tokenizer = kt.data.SubwordTokenizer.train(
    train_texts, vocabulary_size=VOCABULARY, max_sentences=10_000
)
print(f"{tokenizer} learned in {time.perf_counter() - start:.0f} s")
print([tokenizer.id_to_piece(i) for i in tokenizer.encode([train_texts[0]])[0][:24]])


def encode(texts: list[str]) -> list[np.ndarray]:
    """Token ids of each text, cut to the first and last tokens."""
    encoded = []
    for ids in tokenizer.encode(texts):
        if len(ids) > MAX_LENGTH:
            ids = ids[: MAX_LENGTH - TAIL] + ids[-TAIL:]
        encoded.append(np.asarray(ids, "int32"))
    return encoded


train_ids, validation_ids, test_ids = (
    encode(texts) for texts in (train_texts, validation_texts, test_texts)
)
lengths = np.array([len(tokens) for tokens in tokenizer.encode(train_texts)])
fig, ax = plt.subplots(figsize=(6, 2.5))
ax.hist(lengths, bins=np.arange(0, 1500, 25))
ax.axvline(MAX_LENGTH, color="C3", ls="--", label=f"MAX_LENGTH = {MAX_LENGTH}")
ax.set(xlabel="subword tokens per review", ylabel="reviews")
ax.legend()
plt.show()
print(f"{(lengths > MAX_LENGTH).mean():.1%} of the reviews are cut")

# %% [markdown]
# Batches of reviews of similar length waste less work on padding (the
# paper batches translation pairs "by approximate sequence length", §5.1).
# `tf.data`'s `bucket_by_sequence_length` groups the reviews into length
# buckets and pads each batch to its longest review; id 0 is padding.

# %%
BATCH_SIZE = 32
BOUNDARIES = [64, 128, 192, 256, 320, 384, 448]


def make_dataset(ids: list[np.ndarray], labels: np.ndarray, shuffle: bool):
    dataset = tf.data.Dataset.from_generator(
        lambda: zip(ids, labels, strict=True),
        output_signature=(
            tf.TensorSpec([None], tf.int32),
            tf.TensorSpec([], tf.int32),
        ),
    ).cache()
    if shuffle:
        dataset = dataset.shuffle(len(ids), seed=0, reshuffle_each_iteration=True)
    dataset = dataset.bucket_by_sequence_length(
        lambda tokens, _: tf.shape(tokens)[0],
        BOUNDARIES,
        [BATCH_SIZE] * (len(BOUNDARIES) + 1),
    )
    # A bucket of n reviews gives ceil(n / BATCH_SIZE) batches per pass; telling
    # tf.data the total spares Keras' "ran out of data" warning.
    buckets = np.searchsorted(BOUNDARIES, [len(x) for x in ids], side="right")
    batches = int(np.ceil(np.bincount(buckets) / BATCH_SIZE).sum())
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(batches))
    return dataset.prefetch(tf.data.AUTOTUNE)


train_data = make_dataset(train_ids, train_labels, shuffle=True)
validation_data = make_dataset(validation_ids, validation_labels, shuffle=False)
test_data = make_dataset(test_ids, test_labels, shuffle=False)

# %% [markdown]
# ## 3. An encoder-only classifier
#
# * `ScaledEmbedding` with `mask_zero=True`: the embeddings, multiplied by
#   $\sqrt{d_\text{model}}$ (§3.4), and a padding mask that every later
#   layer receives;
# * `SinusoidalPositionEncoding` (Eqs. 5-6), `PositionEmbedding` (learned,
#   Table 3 row E), or nothing;
# * dropout on the sum (§5.4), then an `EncoderBlock`: multi-head
#   self-attention and the feed-forward network, each in a residual
#   connection followed by layer normalisation (§3.1);
# * the average of the outputs over the real (unmasked) tokens, dropout,
#   and a logistic output unit.

# %%
D_MODEL, HEADS, D_FF, DROPOUT = 64, 4, 128, 0.2


def build_classifier(position: str) -> keras.Model:
    """`position`: "sinusoidal", "learned" or "none"."""
    token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
    x = kt.layers.ScaledEmbedding(VOCABULARY, D_MODEL, mask_zero=True)(token_ids)
    if position == "sinusoidal":
        x = kt.layers.SinusoidalPositionEncoding()(x)
    elif position == "learned":
        x = kt.layers.PositionEmbedding(max_length=MAX_LENGTH)(x)
    x = keras.layers.Dropout(DROPOUT)(x)
    x = kt.layers.EncoderBlock(num_heads=HEADS, d_ff=D_FF, dropout=DROPOUT)(x)
    x = keras.layers.GlobalAveragePooling1D()(x)  # over the real tokens only
    x = keras.layers.Dropout(DROPOUT)(x)
    positive = keras.layers.Dense(1, activation="sigmoid", name="positive")(x)
    return keras.Model(token_ids, positive, name=f"classifier_{position}")


build_classifier("sinusoidal").summary(line_length=90)

# %% [markdown]
# ## 4. Training, with and without positions
#
# AdamW with a short linear warm-up and a cosine decay, binary
# cross-entropy, a fixed number of epochs; the validation reviews show
# the progress, the test reviews are read once at the end.

# %%
EPOCHS = 1 if FAST else 3


def train(position: str) -> tuple[keras.Model, dict, float]:
    keras.utils.set_random_seed(0)
    model = build_classifier(position)
    steps = EPOCHS * int(np.ceil(len(train_ids) / BATCH_SIZE))
    learning_rate = keras.optimizers.schedules.CosineDecay(
        0.0, steps, warmup_target=1e-3, warmup_steps=steps // 10
    )
    model.compile(
        optimizer=keras.optimizers.AdamW(learning_rate, weight_decay=0.01),
        loss="binary_crossentropy",
        metrics=["accuracy"],
    )
    start = time.perf_counter()
    history = model.fit(
        train_data,
        validation_data=validation_data,
        epochs=EPOCHS,
        shuffle=False,  # the dataset shuffles itself
        verbose=2,
    )
    return model, history.history, time.perf_counter() - start


results = {}
for position in ("sinusoidal", "none"):
    print(f"--- position information: {position}")
    model, history, seconds = train(position)
    _, accuracy = model.evaluate(test_data, verbose=0)
    results[position] = {
        "model": model,
        "history": history,
        "seconds": seconds,
        "test_accuracy": accuracy,
    }
    print(f"test accuracy {accuracy:.4f} after {seconds / 60:.1f} min of training")

# %%
fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.2))
epochs = np.arange(1, EPOCHS + 1)
for color, (position, result) in zip(("C0", "C1"), results.items(), strict=True):
    for key, style, split in (
        ("accuracy", ":", "training"),
        ("val_accuracy", "-", "validation"),
    ):
        left.plot(
            epochs,
            result["history"][key],
            style,
            color=color,
            marker="o",
            label=f"{position}, {split}",
        )
left.set(xlabel="epoch", ylabel="accuracy", xticks=np.arange(1, EPOCHS + 1))
left.legend(fontsize="small")
names = list(results)
accuracies = [results[name]["test_accuracy"] for name in names]
bars = right.bar(names, accuracies, color=["C0", "C1"])
right.bar_label(bars, fmt="%.4f")
right.set(ylabel="test accuracy", ylim=(min(accuracies) - 0.05, 1.0))
right.set_title("25,000 test reviews" if not FAST else "FAST sample")
plt.show()

for name, result in results.items():
    print(
        f"{name:10s} test accuracy {result['test_accuracy']:.4f}, "
        f"{result['seconds'] / 60:.1f} min"
    )

# %% [markdown]
# ## 5. What "no position information" means
#
# Without position encodings, self-attention is *permutation-equivariant*:
# shuffling the tokens shuffles the outputs the same way, and the average
# over positions does not change at all. The model without positions reads
# a bag of (contextualised) words; the other one can tell "not good, bad"
# from "not bad, good". Shuffling the tokens of a few test reviews makes the
# difference visible.

# %%
rng = np.random.default_rng(1)
examples = [test_ids[i][:200] for i in rng.choice(len(test_ids), 6, replace=False)]
for name, result in results.items():
    model = result["model"]
    changes = []
    for ids in examples:
        shuffled = rng.permutation(ids)
        original = model.predict(ids[None], verbose=0)[0, 0]
        permuted = model.predict(shuffled[None], verbose=0)[0, 0]
        changes.append(abs(float(original - permuted)))
    print(
        f"{name:10s} largest change of P(positive) after shuffling: {max(changes):.6f}"
    )

# %% [markdown]
# On sentiment, word order matters surprisingly little: which words occur
# carries most of the signal. In our full run (seed 0) both models reached a
# test accuracy of 0.881, with and without position encodings.
# Translation is different: there, a model without positions could not tell
# "dog bites man" from "man bites dog".
#
# The figures of the full run, for comparison with other models, are listed
# in the project's results page (`docs/results.md`).
