# %% [markdown]
# # The Image Transformer: local 2D attention, DMOL, image completion
#
# The Image Transformer (Parmar et al., 2018) generates an image one
# intensity at a time with the decoder of *Attention Is All You Need*. Two
# ideas make that affordable and natural for images:
#
# * **local self-attention** (§3.2): a 32 x 32 RGB image has 3,072
#   intensities, and full self-attention would cost $O(n^2)$; each block of
#   queries attends only to a *memory block* around it, in 1D (raster order)
#   or in 2D (a rectangle of the image), and the image is generated "one
#   query block after another, ordering the blocks in raster-scan order";
# * **an output distribution over intensities** (§3.4): a 256-way softmax
#   per channel, or a *discretized mixture of logistics* (DMOL) per pixel,
#   whose negative log-likelihood in **bits per dimension** is the measure of
#   the paper.
#
# This notebook draws the 2D blocks and the paper's generation order as
# Figure 2 does, trains a small model on 32 x 32 patches of the photographs
# that ship with scikit-image (whole photographs held out for validation and
# test) with the package's one training command, compares its bits per
# dimension on the held-out patches with lossless PNG and WebP, and
# completes the lower half of held-out patches (the paper's Figure 1). The
# run is the one of the command line,
#
# ```
# keras-transformer train configs/image_sample_patches.json \
#     --workdir runs/image_transformer
# keras-transformer evaluate --workdir runs/image_transformer --weights average
# keras-transformer complete --workdir runs/image_transformer --weights average \
#     --output completions.png
# ```
#
# and a run folder trained beforehand with that command is simply reused:
# `train` resumes a stopped run and returns at once from a finished one.
# The full run trains for 12,000 updates (its training time, read from the
# run's own TensorBoard records, is printed below); `FAST=1` trains a tiny
# model for a few updates as a smoke test, whose numbers mean nothing.

# %%
# %matplotlib inline
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Rectangle
from PIL import Image

import keras_transformer as kt
from keras_transformer import training
from keras_transformer.data import images as image_data
from keras_transformer.runs import logged_scalars, logged_training_seconds
from keras_transformer.training.config import read_config_file

FAST = os.environ.get("FAST") == "1"
# The run folder: $KT_WORKDIR/image_transformer (examples/execute_notebooks.py
# sets KT_WORKDIR=runs); a run trained there beforehand is resumed or reused.
RUNS = Path(os.environ.get("KT_WORKDIR", "runs"))
WORKDIR = RUNS / ("image_transformer_fast" if FAST else "image_transformer")
# The configs/ folder of the checkout this package comes from.
CONFIGS = Path(kt.__file__).resolve().parent.parent / "configs"
print("FAST:", FAST, "| run folder:", WORKDIR)

# %% [markdown]
# ## 1. Local 2D attention and the generation order, as in Figure 2
#
# With *channel-wise* positions every intensity is a position: an image of
# height $H$, width $W$ and $C$ channels is a grid of $H$ rows and $W C$
# columns. The DMOL output uses one position per pixel instead (a grid of
# $H \times W$). Local 2D attention cuts the grid into **query blocks** of
# $h_q \times w_q$ positions; each attends to its **memory block**, the query
# block extended by $h_m$ rows above and $w_m$ columns on each side.
#
# To stay causal a query sees only the positions generated before it, and
# the paper generates "one query block after another, ordering the blocks in
# raster-scan order" (§3.2), the positions inside a block in raster order.
# Position $(r, c)$ is generated at step
#
# $$
# t(r, c) = \left( \left\lfloor \tfrac{r}{h_q} \right\rfloor \tfrac{W'}{w_q}
# + \left\lfloor \tfrac{c}{w_q} \right\rfloor \right) h_q w_q
# + (r \bmod h_q)\, w_q + (c \bmod w_q)
# $$
#
# ($W'$ the columns of the grid), and the query in the block with top-left
# corner $(r_0, c_0)$ sees the key $(r', c')$ when
#
# $$
# r_0 - h_m \le r' < r_0 + h_q,\;
# c_0 - w_m \le c' < c_0 + w_q + w_m,\;
# t(r', c') \le t(r, c) .
# $$
#
# So a query sees all of the memory block that lies in earlier query blocks
# (the blocks above, their right flange included, and the block to its
# left) and the earlier positions of its own block. One raster order over
# the whole image, $t(r, c) = r W' + c$, stays available as
# `generation_order="image"` (this package's order up to 0.1.0): there the
# right flange is seen only in the rows above the query, and the block to
# the left only up to the query's row.
#
# Below, a 16 x 16 grid with query blocks of 4 x 4 and flanges of 4 rows
# and 4 columns; the query is the dark cell. Local 1D attention (right) is
# the same idea on the raster-order sequence: blocks of $l_q$ positions
# attending to the $l_m$ positions before them.

# %%
rows = cols = 16
query_block, flange = (4, 4), (4, 4)
query = (9, 6)  # (row, column) of the query drawn
masks_2d = {
    order: np.asarray(
        kt.layers.local_2d_attention_mask(
            rows, cols, query_block, flange, causal=True, generation_order=order
        )
    )
    for order in ("blocks", "image")
}
mask_1d = np.asarray(
    kt.layers.local_block_attention_mask(rows * cols, 32, 64, causal=True)
)
position = query[0] * cols + query[1]


def draw(ax, mask_row, title, rectangles):
    seen = mask_row.reshape(rows, cols).astype(float)
    picture = np.where(seen > 0, 0.55, 0.95)
    picture[query] = 0.0
    ax.imshow(picture, cmap="gray", vmin=0, vmax=1)
    for (top, left, height, width), colour, style in rectangles:
        ax.add_patch(
            Rectangle(
                (left - 0.5, top - 0.5),
                width,
                height,
                fill=False,
                edgecolor=colour,
                linewidth=2.5,
                linestyle=style,
            )
        )
    ax.set_xticks(np.arange(-0.5, cols, 1), minor=True)
    ax.set_yticks(np.arange(-0.5, rows, 1), minor=True)
    ax.grid(which="minor", color="white", linewidth=0.5)
    ax.tick_params(which="both", length=0, labelbottom=False, labelleft=False)
    ax.set_title(title, fontsize="medium")


(h_q, w_q), (h_m, w_m) = query_block, flange
top, left = query[0] // h_q * h_q, query[1] // w_q * w_q
blocks_2d = [
    ((top, left, h_q, w_q), "red", "-"),
    ((top - h_m, left - w_m, h_q + h_m, w_q + 2 * w_m), "tab:blue", "--"),
]
fig, axes = plt.subplots(1, 3, figsize=(15, 5.5))
draw(
    axes[0],
    masks_2d["blocks"][position],
    "local 2D, block by block (§3.2, default)",
    blocks_2d,
)
draw(
    axes[1],
    masks_2d["image"][position],
    'local 2D, generation_order="image"',
    blocks_2d,
)
draw(
    axes[2],
    mask_1d[position],
    "local 1D: l_q = 32 (red), l_m = 64 before it (blue)",
    [((8, 0, 2, 16), "red", "-"), ((4, 0, 4, 16), "tab:blue", "--")],
)
fig.suptitle(
    "The positions the dark query attends to (grey): query block (red), "
    "memory block (blue)"
)
fig.tight_layout()
plt.show()

order = kt.layers.generation_positions(8, 8, (4, 4))
steps = np.argsort(order).reshape(8, 8)
print("generation step of each position of an 8 x 8 grid, query blocks 4 x 4:")
print(steps)

# %% [markdown]
# ## 2. The data: patches of whole, held-out photographs
#
# The run's `image` section (`"source": "sample_patches"`) names
# `kt.data.images.load_sample_patches`, which cuts the RGB photographs
# bundled in the scikit-image wheel (nothing is downloaded) into 32 x 32
# patches: overlapping ones (every 16 pixels) from five training
# photographs, and a non-overlapping tiling of one photograph each for
# validation (*chelsea*, the cat) and test (*coffee*). No held-out patch
# shares a pixel with a training patch. `training.load_image_data` reads
# them here exactly as the run does.
#
# The baseline: each test patch written as its own lossless PNG (and
# WebP-lossless) file, the bits of the files divided by the number of
# intensities.

# %%
# The run of configs/image_sample_patches.json (the full run: 12,000
# updates, epochs of 400). FAST mode trains a tiny model instead (its own
# model section, as a second config file would have) on a sixteenth of the
# training patches (corners every 64 pixels instead of 16).
raw_config = read_config_file(CONFIGS / "image_sample_patches.json")
overrides = []
if FAST:
    raw_config["model"].update(num_layers=1, d_model=32, d_ff=64, num_heads=2)
    overrides = [
        "image.train_stride=64",
        "image.batch_size=4",
        "train.train_steps=6",
        "train.steps_per_epoch=3",
        "train.log_every=3",
    ]
config = training.apply_overrides(raw_config, overrides)

data = training.load_image_data(config.options)
for name in ("train", "validation", "test"):
    split = getattr(data, name)
    print(f"{name:<10} {len(split):5d} patches from {sorted(set(split.sources))}")

baselines = {"PNG": image_data.lossless_bits_per_dim(data.test.images, "PNG")}
try:
    baselines["WebP"] = image_data.lossless_bits_per_dim(data.test.images, "WEBP")
except ValueError as error:  # a Pillow without WebP
    print(error)
for codec, bits in baselines.items():
    print(f"{codec:<5} lossless, one file per test patch: {bits:.3f} bits/dim")

fig, axes = plt.subplots(3, 8, figsize=(12, 4.8))
for row, name in zip(axes, ("train", "validation", "test"), strict=True):
    split = getattr(data, name)
    picks = np.random.default_rng(0).choice(len(split), len(row), replace=False)
    for ax, index in zip(row, picks, strict=True):
        ax.imshow(split.images[index])
        ax.axis("off")
    row[0].set_title(name, loc="left")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 3. Training
#
# The model (the `model` section of `configs/image_sample_patches.json`,
# the `"small"` preset of `kt.models.image_presets` in the block order): 4
# layers of local 2D attention over the 32 x 32 pixels (query blocks of 8 x
# 8, 4 rows above and 8 columns on each side), $d_{model} = 64$, and a DMOL
# output with 5 components, whose channel coefficients let green depend on
# red and blue on both. Each pixel enters the model as the linear map of its
# three intensities scaled to $[-1, 1]$ (the paper's "1x3 strided
# convolution"). The inputs are shifted by one position *in the generation
# order* inside the model, so it is trained with the images as input and
# target: the loss is the bits per dimension,
#
# $$
# \text{bits/dim} = -\frac{1}{N} \sum_{i=1}^{N} \log_2 p(x_i \mid x_{<i}),
# $$
#
# with Adam and the learning rate of Eq. 7 (Vaswani et al., §5.3), here
# 1.2 x Eq. 7 with 400 warm-up steps. One departure from the paper: each
# block normalizes the input of its sublayers (`"norm_first": true`, the
# "pre-LN" Transformer) where the paper normalizes their output (§3.1 of
# Vaswani et al.). In short runs of this config (1,200 updates) the
# paper's order needed a 6 x lower learning rate and reached a worse
# validation bits/dim (docs/results.md, "The Image Transformer", gives the
# figures and the commands); `"norm_first": false` trains the paper's order.
#
# `training.train(config, workdir)` is what `keras-transformer train` calls:
# the same run folder, checkpoints every epoch, resume of a stopped run
# (and an immediate return from a finished one), TensorBoard summaries of
# the training and validation bits per dimension, and at the end the bits
# per dimension of the test patches with the weights `train.evaluate_with`
# names: here `"average"`, the average of the last five checkpoints (the
# last 2,000 updates), as the paper averages its last checkpoints (§6.1 of
# Vaswani et al.).

# %%
result = training.train(config, WORKDIR)
print(
    f"{result.steps} updates, {result.model.count_params():,} parameters; this "
    f"call trained {result.steps - result.initial_step} of them"
)

# %% [markdown]
# The training curve and the training time come from the run's own
# TensorBoard records (`logs/train` and `logs/validation` in the run folder),
# so they are those of the run however many calls trained it: every process
# that trained the run wrote its own event files, and its training time is
# the span from its first to its last training summary.
#
# The committed outputs come from one call of `keras-transformer train` with
# these settings (given as `--set` overrides of the config file before it
# held them) on a 2-core CPU, at the lowest priority, that a test run of
# the whole package shared for its first 65 minutes, so its recorded time
# is that of a busy machine.
# Once the machine was quiet, its last 2,000 updates took 0.276 s each
# (validation and checkpoints included), which puts the 12,000 updates at
# about
# 55<!-- record: image_transformer_quiet_estimate.estimated_minutes --> minutes
# on a quiet machine of that kind (an estimate, not a measurement).


# %%
log_dir = WORKDIR / "logs"
train_steps, train_bits = logged_scalars(log_dir / "train", "bits_per_dim")
val_steps, val_bits = logged_scalars(log_dir / "validation", "bits_per_dim")
minutes = logged_training_seconds(log_dir / "train") / 60
print(
    f"training time recorded by the run: {minutes:.1f} min for {result.steps} updates"
)

# Each curve against the codecs on its own patches: the training curve
# against the training patches, the validation curve against the validation
# photograph (the test patches' figures are those of section 4).
curves = {
    "train": (train_steps, train_bits, "-", "C0", "training (every log_every)"),
    "validation": (val_steps, val_bits, "s-", "C1", "validation (chelsea)"),
}
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True, layout="constrained")
for ax, (name, (steps, bits, style, color, label)) in zip(
    axes, curves.items(), strict=True
):
    ax.plot(steps, bits, style, color=color, label=label)
    for (codec, _), line in zip(baselines.items(), (":", "--"), strict=False):
        format_name = "WEBP" if codec == "WebP" else codec
        value = image_data.lossless_bits_per_dim(
            getattr(data, name).images, format_name
        )
        print(f"{codec:<5} lossless on the {name} patches: {value:.3f} bits/dim")
        ax.axhline(value, linestyle=line, color="grey", label=f"{codec}: {value:.3f}")
    ax.set(xlabel="update", title=f"{name} patches")
    ax.legend(fontsize="small")
axes[0].set_ylabel("bits / dim")
plt.show()

# %% [markdown]
# ## 4. Bits per dimension on the held-out test patches
#
# Every intensity of the test patches, coded with the model's distribution
# given the intensities generated before it, against the same patches as PNG
# and WebP-lossless files. `train` ends with this evaluation (with the
# average of the last five checkpoints); `keras-transformer evaluate
# --workdir ... --weights W` computes it again from the run folder for the
# last checkpoint, the weights of the best validation bits/dim (the
# *chelsea* photograph) or the average.


# %%
def keras_transformer(*arguments: str) -> str:
    """Runs the `keras-transformer` command (of this Python); its output."""
    command = [sys.executable, "-m", "keras_transformer", *arguments]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"keras-transformer {arguments[0]} failed:\n{done.stderr}")
    return done.stdout.strip()


evaluation = result.evaluation
print(
    f"test bits/dim: {evaluation.bits_per_dim:.3f} (Image Transformer, "
    f"{config.train.evaluate_with} weights, {evaluation.images} patches)"
)
for codec, bits in baselines.items():
    verdict = "beats" if evaluation.bits_per_dim < bits else "does not beat"
    print(f"  {codec:<5} {bits:.3f} bits/dim: the model {verdict} {codec}")
for weights in ("last", "best", "average"):
    print(
        f"keras-transformer evaluate --weights {weights}:",
        keras_transformer("evaluate", "--workdir", str(WORKDIR), "--weights", weights),
    )

# %% [markdown]
# ## 5. Completing the lower half (Figure 1 of the paper)
#
# `keras-transformer complete` keeps the top rows of test patches (by
# default half the image, in whole rows of query blocks: here the first 8
# of the 16 query blocks) and draws the rest three times, pixel by pixel in
# the generation order, each from the model's distribution given everything
# before it. The sampler (`kt.image_sampling.ImageSampler`) runs the
# model's *cached* step inside one compiled `tf.while_loop`: every pixel
# costs one pass through the layers for that pixel alone, attending to the
# cached keys and values of its memory block. Each row of the PNG grid it
# writes is one test patch: the given rows (the rest grey), the three
# completions, the original. `complete` takes the first test patches: here
# the top row of 18 tiles of the *coffee* photograph, of which six are
# shown: the dark corner (0), the corner's diagonal edge against the table
# (4), the grain of the wooden table (6 and 11), a tile whose lower half
# holds the rim of the cup (8) and a lighter part of the table (16).
#
# `--temperature 1` (the default) draws from the model's distribution;
# `--temperature 0.8` sharpens every one of its distributions (the
# mixture's logits divided by 0.8, the logistics' scales multiplied by
# it), which makes the rare extreme draws rarer. Both grids below use the same seed.


# %%
images, samples = (2 if FAST else 18), 3
shown = [index for index in (0, 4, 6, 8, 11, 16) if index < images]
given_rows = config.model.image_shape[0] // 2


def completion_tiles(temperature: float) -> list[list[np.ndarray]]:
    """Runs `complete` at `temperature`; the grid's 32 x 32 tiles by row."""
    grid_file = WORKDIR / f"completions_t{temperature:g}.png"
    print(
        keras_transformer(
            "complete",
            "--workdir",
            str(WORKDIR),
            "--weights",
            "average",
            "--output",
            str(grid_file),
            "--images",
            str(images),
            "--samples",
            str(samples),
            "--temperature",
            str(temperature),
        )
    )
    grid = np.asarray(Image.open(grid_file))
    # The grid shows each pixel as 4 x 4 pixels, with 1-pixel white gaps
    # between the 32 x 32 tiles; every `scale`-th pixel gives it back at its
    # own size.
    scale = grid.shape[0] // (images * 33 - 1)
    small = grid[::scale, ::scale]
    return [
        [
            small[33 * row : 33 * row + 32, 33 * column : 33 * column + 32]
            for column in range(samples + 2)
        ]
        for row in range(images)
    ]


def draw_completions(tiles: list[list[np.ndarray]], temperature: float) -> None:
    fig, axes = plt.subplots(
        len(shown), samples + 2, figsize=(2 * (samples + 2), 2 * len(shown))
    )
    titles = [
        "given rows",
        *[f"completion {i + 1}" for i in range(samples)],
        "original",
    ]
    for axes_row, row in zip(np.atleast_2d(axes), shown, strict=True):
        for ax, tile in zip(axes_row, tiles[row], strict=True):
            ax.imshow(tile)
            ax.axis("off")
        axes_row[0].text(-3, 16, str(row), ha="right", va="center")
    for ax, title in zip(np.atleast_2d(axes)[0], titles, strict=True):
        ax.set_title(title, fontsize="small")
    fig.suptitle(f"temperature {temperature:g}")
    fig.tight_layout()
    plt.show()
    unchanged = all(
        (completion[:given_rows] == row[-1][:given_rows]).all()
        for row in tiles
        for completion in row[1:-1]
    )
    print("given rows unchanged in every completion:", unchanged)


for temperature in (1.0, 0.8):
    draw_completions(completion_tiles(temperature), temperature)

# %% [markdown]
# ## What to read from this
#
# * The bits per dimension of the model on patches of a photograph it never
#   saw are compared with lossless codecs on exactly the same patches; PNG
#   spends its bytes on headers and on filters that predict each byte from
#   its left and upper neighbours, WebP-lossless on richer predictors and
#   entropy codes, the Transformer on a learned distribution of each
#   intensity given all those before it in its memory block. After 12,000
#   updates the model beats both on the test patches (4.053 bits/dim against
#   PNG's 4.928 and WebP's 4.218) and on the training patches in the plot of
#   section 3 (3.603 against WebP's 3.741). On the validation photograph it
#   beats PNG (4.456) but not WebP: its last evaluation, 3.547, is above
#   WebP's 3.500, although a few evaluations on the way dip below it (the
#   best, 3.37, is the one the `best` weights keep).
# * The paper's models are far larger (12 layers, $d_{model} = 512$, trained
#   on 50,000 CIFAR-10 images for days on GPUs: 2.90 bits/dim); this one has
#   0.14M parameters and trains on a few thousand patches on a CPU.
# * The same command trains on CIFAR-10 from the standard python batches:
#   `--set image.source=cifar10 --set image.directory=<cifar-10-batches-py>`
#   (`kt.data.images.load_cifar10` reads them), and a config whose model
#   section has `"generation_order": "image"` trains in the whole-image
#   raster order instead of the paper's.
# * The completions continue what the given rows show next to them: the
#   dark corner stays dark (0), the lighter, smooth part of the table stays
#   light and smooth (16), and the slanted grain of the table goes on for
#   the first rows below the given ones (6, 8, 11). Farther down they lose
#   it: the grain fades into blotches lighter and pinker than the table,
#   the edges of the 8 x 8 query blocks show, and at temperature 1 some
#   pixels are much brighter or darker than any around them (fewer at
#   0.8). Where the corner's edge meets the left side of the tile (4), the
#   completions carry the dark corner on down that side in dark blotches,
#   while in the original the edge leaves the tile there. The rim of the
#   cup (8) is in no given row, and no completion draws it. The sampler draws from
#   the model's exact distribution (its step's log-probabilities equal the
#   uncached model's bits/dim in `tests/test_image_sampling.py`), so
#   completions that keep the texture over the whole lower half need a
#   better model: more updates, a larger model, more training images.
