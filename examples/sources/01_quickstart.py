# %% [markdown]
# # Quick start: the Transformer, one layer at a time
#
# This notebook builds the model of *Attention Is All You Need*
# (Vaswani et al., 2017) from its parts, with each equation of the paper next
# to the code that computes it:
#
# 1. scaled dot-product attention (Eq. 1) and its masks,
# 2. multi-head attention (Eqs. 2-3),
# 3. sinusoidal position encodings (Eqs. 5-6),
# 4. scaled token embeddings (§3.4) and the feed-forward network (Eq. 4),
# 5. one encoder layer (§3.1), and
# 6. the whole encoder-decoder model of Figure 1 from a preset of Table 3.
#
# Nothing is trained here; its recorded run took
# 10<!-- record: notebook_run_times.seconds_01 --> s
# on a shared 2-core CPU machine.
# Set `FAST=1` in the environment for the smoke run the tests use.

# %%
# %matplotlib inline
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import display
from keras import ops

import keras_transformer as kt
from keras_transformer import visualize

FAST = os.environ.get("FAST") == "1"
keras.utils.set_random_seed(0)
print("keras", keras.__version__, "| keras-transformer", kt.__version__)

# %% [markdown]
# ## 1. Scaled dot-product attention (§3.2.1, Eq. 1)
#
# $$\mathrm{Attention}(Q, K, V) =
# \mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}\right)V$$
#
# Every query is compared with every key; the softmax turns the scores of one
# query into weights that sum to 1, and the output is the weighted average of
# the values. `kt.layers.scaled_dot_product_attention` returns both the
# output and the weight matrix.
#
# A toy example: five "words" whose vectors are built so that *it* resembles
# *animal* (the anaphora of the paper's Figure 4), while the other words are
# unrelated random vectors.

# %%
words = ["the", "animal", "was", "tired", "it"]
d_k = 16
rng = np.random.default_rng(0)
vectors = rng.normal(size=(len(words), d_k)).astype("float32")
vectors[4] = vectors[1] + 0.3 * rng.normal(size=d_k)  # "it" ~ "animal"

x = vectors[None]  # (batch=1, length=5, d_k)
output, weights = kt.layers.scaled_dot_product_attention(x, x, x)
print("output", tuple(output.shape), "weights", tuple(weights.shape))
print("each row sums to 1:", np.allclose(ops.sum(weights, axis=-1), 1.0))

figure = visualize.plot_attention(
    ops.convert_to_numpy(weights[0]), words, words, title="softmax(QK^T / sqrt(d_k))"
)
display(figure)

# %% [markdown]
# Row *i* holds the weights query *i* gives to every key. Most words attend
# to themselves (a vector is most similar to itself), but *it* splits its
# weight between itself and *animal*, because their vectors point the same
# way: its output is a mixture of the two.
#
# ### Why divide by $\sqrt{d_k}$?
#
# The paper's footnote 4: if the components of $q$ and $k$ are independent
# with mean 0 and variance 1, then $q \cdot k$ has variance $d_k$. Large
# dot products push the softmax into regions with tiny gradients. The plot
# shows the largest weight of a softmax over 20 random keys as $d_k$ grows:
# unscaled, the softmax quickly becomes one-hot; scaled, it does not.

# %%
dims = [4, 16, 64, 256, 1024]
peak = {"unscaled": [], "scaled by 1/sqrt(d_k)": []}
for d in dims:
    q = rng.normal(size=(200, 1, d)).astype("float32")
    k = rng.normal(size=(200, 20, d)).astype("float32")
    _, w_scaled = kt.layers.scaled_dot_product_attention(q, k, k)
    _, w_raw = kt.layers.scaled_dot_product_attention(q, k, k, scale=1.0)
    peak["scaled by 1/sqrt(d_k)"].append(float(ops.mean(ops.max(w_scaled, -1))))
    peak["unscaled"].append(float(ops.mean(ops.max(w_raw, -1))))

fig, ax = plt.subplots(figsize=(5, 3))
for label, values in peak.items():
    ax.plot(dims, values, marker="o", label=label)
ax.set(xscale="log", xlabel="$d_k$", ylabel="mean largest weight", ylim=(0, 1.05))
ax.legend()
plt.show()

# %% [markdown]
# ### Masks: `True` means "may attend"
#
# Every mask in the package has the same polarity: a boolean tensor that is
# `True` where a query may attend to a key. A padding mask of shape
# `(batch, length)` is `True` on real tokens; the decoder adds a causal mask
# (§3.2.3: "prevent leftward information flow"). Masked keys get exactly
# zero weight, and a query with no allowed key at all gets zero weights (and
# a zero output) rather than NaN.

# %%
padding = kt.layers.padding_mask(np.array([[5, 8, 3, 0, 0]]))  # 0 = padding
causal = kt.layers.causal_mask(5, 5)
mask = kt.layers.merge_attention_masks(
    5, 5, query_mask=padding, key_mask=padding, use_causal_mask=True
)
print("padding mask:", ops.convert_to_numpy(padding).astype(int).tolist())

_, masked_weights = kt.layers.scaled_dot_product_attention(x, x, x, mask=mask)
fig, axes = plt.subplots(1, 3, figsize=(11, 3.2), layout="constrained")
for column, (ax, (title, matrix)) in enumerate(
    zip(
        axes,
        [
            ("causal mask", causal),
            ("causal and padding", mask[0]),
            ("weights under that mask", masked_weights[0]),
        ],
        strict=True,
    )
):
    visualize.plot_attention(
        ops.convert_to_numpy(matrix), words, words, ax=ax, show_y_labels=column == 0
    )
    ax.images[0].set_clim(0, 1)  # masks: 1 = may attend; weights: 0 to 1
    ax.set_title(title)
fig.colorbar(axes[0].images[0], ax=axes, label="mask value / weight")
plt.show()
print("rows of the padded queries:", ops.convert_to_numpy(masked_weights[0, 3:]))

# %% [markdown]
# ## 2. Multi-head attention (§3.2.2, Eqs. 2-3)
#
# $$\mathrm{MultiHead}(Q, K, V) = \mathrm{Concat}(\mathrm{head}_1, \ldots,
# \mathrm{head}_h)W^O, \qquad
# \mathrm{head}_i = \mathrm{Attention}(QW_i^Q, KW_i^K, VW_i^V)$$
#
# with $W_i^Q, W_i^K \in \mathbb{R}^{d_\text{model} \times d_k}$,
# $W_i^V \in \mathbb{R}^{d_\text{model} \times d_v}$ and
# $W^O \in \mathbb{R}^{hd_v \times d_\text{model}}$. With
# $d_k = d_v = d_\text{model}/h$ the cost is that of one head of full
# width. `MultiHeadAttention` computes all heads in one batched tensor
# operation. Every call returns `(output, scores, cache)`: the output, the
# weights of each head, and the updated keys and values when given a cache.

# %%
d_model, heads = 16, 4
attention = kt.layers.MultiHeadAttention(num_heads=heads, key_dim=d_model // heads)
out, scores, _ = attention(x, x)
print("output", tuple(out.shape), "| scores (batch, heads, query, key)", scores.shape)

# W^Q, W^K, W^V and W^O, each d_model x d_model, plus their biases.
expected = 4 * (d_model * d_model + d_model)
print("parameters:", attention.count_params(), "= 4 (d_model^2 + d_model) =", expected)

fig, axes = plt.subplots(1, heads, figsize=(3 * heads + 1, 3), layout="constrained")
for head, ax in enumerate(axes):
    visualize.plot_attention(
        ops.convert_to_numpy(scores[0, head]),
        words,
        words,
        ax=ax,
        title=f"head {head}",
        show_y_labels=head == 0,  # the queries are the same words in every head
    )
    ax.images[0].set_clim(0, 1)  # one scale for every head
fig.colorbar(axes[0].images[0], ax=axes, label="weight")
plt.show()

# %% [markdown]
# The heads are initialised at random, so they already look at different
# things; training makes them specialise (see
# `05_attention_visualisation.ipynb`).
#
# ## 3. Position encodings (§3.5, Eqs. 5-6)
#
# Attention is blind to word order: permuting the keys permutes nothing in
# the output. The model therefore adds a position signal to the embeddings:
#
# $$PE_{(pos, 2i)} = \sin\!\left(pos / 10000^{2i/d_\text{model}}\right),
# \qquad PE_{(pos, 2i+1)} = \cos\!\left(pos / 10000^{2i/d_\text{model}}\right)$$
#
# The wavelengths form a geometric progression from $2\pi$ to
# $10000 \cdot 2\pi$. `kt.layers.sinusoidal_encoding` computes the table;
# `SinusoidalPositionEncoding` adds it to its inputs (or concatenates it with
# `merge_mode="concat"`).

# %%
length, depth = 100, 128
table = ops.convert_to_numpy(
    kt.layers.sinusoidal_encoding(ops.arange(length), depth)
)  # (position, dimension)

fig, (left, right) = plt.subplots(1, 2, figsize=(12, 3.5), layout="constrained")
image = left.pcolormesh(table.T, cmap="RdBu", vmin=-1, vmax=1)
left.set(xlabel="position", ylabel="dimension", title="PE (Eqs. 5-6)")
fig.colorbar(image, ax=left)
for dim in (6, 20, 36, 52):
    wavelength = 2 * np.pi * 10000 ** (dim / depth)
    right.plot(table[:, dim], label=f"dimension {dim}: wavelength {wavelength:.0f}")
right.set(xlabel="position", title="even dimensions: sines of growing wavelength")
right.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
plt.show()

# %% [markdown]
# The paper chose sinusoids "because we hypothesized it would allow the model
# to easily learn to attend by relative positions, since for any fixed offset
# $k$, $PE_{pos+k}$ can be represented as a linear function of $PE_{pos}$."
# One consequence is visible in the dot products between encodings: they
# depend only on the distance between two positions, so every row of the
# matrix below is a shifted copy of the first.

# %%
similarity = table @ table.T
fig, (left, right) = plt.subplots(1, 2, figsize=(12, 3.5), layout="constrained")
fig.colorbar(left.imshow(similarity, cmap="viridis"), ax=left)
left.set(xlabel="position", ylabel="position", title="$PE_i \\cdot PE_j$")
for pos in (20, 50, 80):
    right.plot(similarity[pos], label=f"position {pos}")
right.set(xlabel="position j", title="one row per position: same shape, shifted")
# Beside the axes: inside, it hid the peak of position 80.
right.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
plt.show()

# %% [markdown]
# The learned alternative of Table 3, row (E) is `PositionEmbedding`, a
# trainable table of `max_length` rows. Both layers add the encoding by
# default, as the paper does; `merge_mode="concat"` appends it instead.

# %%
embedded = np.zeros((2, 7, 32), "float32")
for layer in [
    kt.layers.SinusoidalPositionEncoding(),
    kt.layers.SinusoidalPositionEncoding(merge_mode="concat", encoding_dim=8),
    kt.layers.PositionEmbedding(max_length=64),
    kt.layers.PositionEmbedding(max_length=64, merge_mode="concat", encoding_dim=8),
]:
    result = layer(embedded)
    print(
        f"{type(layer).__name__:27s} merge_mode={layer.merge_mode!r:9s}",
        f"-> {tuple(result.shape)}, {layer.count_params()} weights",
    )

# %% [markdown]
# ## 4. Embeddings (§3.4) and the feed-forward network (§3.3, Eq. 4)
#
# "We use learned embeddings to convert the input tokens and output tokens to
# vectors of dimension $d_\text{model}$ ... we share the same weight matrix
# between the two embedding layers and the pre-softmax linear transformation
# ... In the embedding layers, we multiply those weights by
# $\sqrt{d_\text{model}}$." `ScaledEmbedding` is all three: called on token
# ids it embeds (and scales), called with `reverse=True` on hidden states it
# returns logits over the vocabulary through the transposed matrix. With
# `mask_zero=True`, id 0 is padding and the layer emits a padding mask that
# the blocks downstream pick up.
#
# Each layer also holds a position-wise feed-forward network
#
# $$\mathrm{FFN}(x) = \max(0, xW_1 + b_1)W_2 + b_2$$
#
# with an inner size $d_{ff} = 2048$ for $d_\text{model} = 512$.

# %%
embedding = kt.layers.ScaledEmbedding(vocabulary_size=50, embedding_dim=d_model)
token_ids = np.array([[7, 12, 3, 0, 0]])
hidden = embedding(token_ids)
logits = embedding(hidden, reverse=True)
print("ids", token_ids.shape, "-> hidden", tuple(hidden.shape), end=" ")
print("-> logits", tuple(logits.shape), "| one matrix:", len(embedding.weights))

ffn = kt.layers.FeedForward(d_ff=4 * d_model)
print("FFN", tuple(ffn(hidden).shape), "| parameters:", ffn.count_params())

# %% [markdown]
# ## 5. One encoder layer (§3.1)
#
# "Each layer has two sub-layers ... We employ a residual connection around
# each of the two sub-layers, followed by layer normalization. That is, the
# output of each sub-layer is $\mathrm{LayerNorm}(x + \mathrm{Sublayer}(x))$."
# Dropout is applied to each sub-layer's output before the residual sum
# (§5.4). `EncoderBlock` is that layer; `norm_first=True` gives the pre-LN
# variant that many later models use.
#
# The padding mask travels with the embeddings, so the padded positions
# cannot change the outputs at the real positions. The check below compares
# the outputs for the same three tokens with and without two padding
# positions.

# %%
block = kt.layers.EncoderBlock(num_heads=heads, d_ff=4 * d_model, dropout=0.1)
embed = kt.layers.ScaledEmbedding(50, d_model, mask_zero=True)
position = kt.layers.SinusoidalPositionEncoding()


def encode(ids: np.ndarray) -> np.ndarray:
    return ops.convert_to_numpy(block(position(embed(ids)), training=False))


padded = encode(np.array([[7, 12, 3, 0, 0]]))
unpadded = encode(np.array([[7, 12, 3]]))
print("output shape", padded.shape, "| parameters", block.count_params())
print("padding changes nothing:", np.allclose(padded[:, :3], unpadded, atol=1e-5))

# %% [markdown]
# `DecoderBlock` adds the masked self-attention and the encoder-decoder
# attention of Figure 1 (right); `init_cache` and `call(..., cache=...)`
# decode one token at a time with key/value caches (see the
# concepts page *Caching for incremental decoding*, `docs/concepts/caching.md`).
#
# ## 6. The whole model, from a preset of Table 3
#
# `kt.models.presets` holds the base and big models and every row of
# Table 3, plus `small` and `tiny` models for CPUs. `build_transformer`
# wires the layers of Figure 1 into a functional Keras model
# `(source_ids, target_ids) -> logits`.

# %%
config = kt.models.presets["base"]
print(
    f"base: N={config.num_encoder_layers}, d_model={config.d_model}, "
    f"d_ff={config.d_ff}, h={config.num_heads}, P_drop={config.dropout}, "
    f"vocabulary={config.vocabulary_size}"
)
# Label smoothing (eps_ls = 0.1, §5.4) belongs to training, not to the
# model: it is `train.label_smoothing` of a training config.
model = kt.models.build_transformer(config)
model.summary(line_length=100)

# %% [markdown]
# ### 63M parameters, and the paper's 65M
#
# The count can be rebuilt by hand. Source embedding, target embedding and
# the pre-softmax projection are **one** matrix (§3.4), counted once:

# %%
V, d, d_ff, N = config.vocabulary_size, config.d_model, config.d_ff, 6
attention_params = 4 * (d * d + d)  # W^Q, W^K, W^V, W^O and biases
ffn_params = d * d_ff + d_ff + d_ff * d + d  # W_1, b_1, W_2, b_2
norm_params = 2 * d  # gain and bias
parts = {
    "shared embedding": V * d,
    "encoder layers": N * (attention_params + ffn_params + 2 * norm_params),
    "decoder layers": N * (2 * attention_params + ffn_params + 3 * norm_params),
}
for name, count in parts.items():
    print(f"{name:17s} {count / 1e6:6.2f}M")
print(f"{'total':17s} {sum(parts.values()) / 1e6:6.2f}M", end="  ")
print(f"(model.count_params(): {model.count_params() / 1e6:.2f}M)")
paper = kt.models.PAPER_PARAMETER_COUNTS_M["base"]
print(f"the paper's Table 3: {paper}M")

# %% [markdown]
# We get 63.1M, the paper reports 65M. Everything but the embedding is fixed
# by the architecture, so the gap is in the vocabulary: the paper only says
# "a shared source-target vocabulary of about 37000 tokens", and the 2M
# difference is about 4,000 rows of 512 weights, i.e. a vocabulary of some
# 41k pieces. Table 3's counts are rounded and do not fit one single
# vocabulary size (the big model's count implies about 36k); see
# `docs/architecture.md` for the row-by-row comparison the tests make.
#
# The other presets are built the same way; the parameter counts of the
# Table 3 rows with $d_\text{model} = 512$ differ from `base` by what the
# paper says.

# %%
rows = ["table3_B_dk16", "table3_C_n2", "table3_C_ff4096", "table3_C_n8", "big"]
if FAST:
    rows = rows[:2]
for name in rows:
    count = kt.models.build_transformer(kt.models.presets[name]).count_params()
    paper = kt.models.PAPER_PARAMETER_COUNTS_M[name]
    print(f"{name:16s} ours {count / 1e6:6.1f}M   paper {paper}M")

# %% [markdown]
# ## Where next
#
# * `02_translation.ipynb`: train a small model on Multi30k German→English,
#   decode with beam search, score with BLEU, export it.
# * `03_text_classification.ipynb`: the encoder alone as a sentiment
#   classifier on IMDB, with and without position information.
# * `04_distributed_training.ipynb`: the same training on several devices.
# * `05_attention_visualisation.ipynb`: what the heads of a trained model
#   look at.
