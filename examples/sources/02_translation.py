# %% [markdown]
# # Translation end to end: Multi30k German → English
#
# The paper trains on WMT 2014 (4.5M sentence pairs for English-German) on
# eight GPUs for 12 hours. This notebook follows the same recipe (§5) at a
# size that trains on a CPU: **Multi30k** (Elliott et al., 2016), 29,000
# German descriptions of Flickr images with their English translations.
#
# | §   | paper                                   | here                       |
# |-----|-----------------------------------------|----------------------------|
# | 5.1 | shared BPE vocabulary, ~37,000 tokens   | shared SentencePiece, 8,000 |
# | 5.1 | ~25,000 source + 25,000 target tokens   | 4,096 tokens per batch     |
# | 5.3 | Adam 0.9/0.98/1e-9, Eq. 7, warm-up 4,000 | the same, warm-up 1,000   |
# | 5.4 | dropout 0.1, label smoothing 0.1        | the same                   |
# | 6.1 | beam 4, length penalty 0.6              | greedy, and beam 4 / 0.6   |
# | 6.1 | BLEU                                    | sacreBLEU (Post, 2018)     |
#
# With `FAST=1` everything shrinks to a smoke run of a minute or so (an
# untrained model translates badly, of course). The full run trains a
# 3+3-layer, $d_\text{model}=128$ model (2.4M parameters) for 2,000 updates,
# about 11 passes over the data. In the committed run an update took
# 1.17<!-- record: notebook_02.seconds_per_update --> s, validation included,
# on two CPU cores shared with other jobs, and the whole notebook
# 2,427<!-- record: notebook_run_times.seconds_02 --> s (about 40 minutes).

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
import sacrebleu
import tensorflow as tf
from IPython.display import display

import keras_transformer as kt
from keras_transformer import decoding, export, training, translation, visualize

FAST = os.environ.get("FAST") == "1"
tf.get_logger().setLevel("ERROR")  # no INFO lines from tf.distribute, tracing

# The data sets are read from $KT_DATA_DIR/<name> when it is set, else
# downloaded once into ~/.cache/keras_transformer. In a development checkout
# the project's shared copy sits next to the repository.
shared = Path("../../shared/data").resolve()
if "KT_DATA_DIR" not in os.environ and shared.is_dir():
    os.environ["KT_DATA_DIR"] = str(shared)
WORKDIR = Path(os.environ.get("KT_WORKDIR", "runs")) / (
    "translation_fast" if FAST else "translation"
)
print(
    "FAST:",
    FAST,
    "| data:",
    "KT_DATA_DIR" if "KT_DATA_DIR" in os.environ else "download",
)
print("work directory:", WORKDIR)

# %% [markdown]
# ## 1. The data

# %%
train_pairs = kt.data.load_multi30k("train", "de", "en")
validation_pairs = kt.data.load_multi30k("val", "de", "en")
test_pairs = kt.data.load_multi30k("test_2016_flickr", "de", "en")
print(f"{len(train_pairs)} / {len(validation_pairs)} / {len(test_pairs)} pairs")
for source, target in zip(
    train_pairs.sources[:3], train_pairs.targets[:3], strict=True
):
    print(f"  de: {source}\n  en: {target}")

# %% [markdown]
# ## 2. A shared subword vocabulary (§5.1)
#
# "Sentences were encoded using byte-pair encoding, which has a shared
# source-target vocabulary." One vocabulary for both languages lets the
# source embedding, the target embedding and the output projection be one
# matrix (§3.4). `SubwordTokenizer` learns a SentencePiece vocabulary
# (unigram language model by default) and tokenizes inside TensorFlow
# graphs; ids 0-3 are padding, unknown, start and end.
#
# `training.train` learns this vocabulary itself on a fresh run; a
# tokenizer saved in `<workdir>/tokenizer` beforehand is used instead, which
# is what happens here.

# %%
VOCABULARY = 1000 if FAST else 8000
tokenizer_dir = WORKDIR / "tokenizer"
if (tokenizer_dir / "tokenizer.model").is_file():
    tokenizer = kt.data.SubwordTokenizer.load(tokenizer_dir)
else:
    start = time.perf_counter()
    tokenizer = kt.data.SubwordTokenizer.train(
        [*train_pairs.sources, *train_pairs.targets],
        vocabulary_size=VOCABULARY,
        max_sentences=10_000 if FAST else None,
    )
    tokenizer.save(tokenizer_dir)
    print(f"learned in {time.perf_counter() - start:.0f} s")
print(tokenizer)

sentence = train_pairs.sources[1]
ids = tokenizer.encode([sentence])[0]
print(sentence)
print([tokenizer.id_to_piece(i) for i in ids])
print(ids, "->", tokenizer.decode([ids])[0])

lengths = [len(ids) for ids in tokenizer.encode(list(train_pairs.sources))]
fig, ax = plt.subplots(figsize=(5, 2.5))
ax.hist(lengths, bins=range(0, 60))
ax.set(xlabel="subwords per German sentence", ylabel="sentences")
plt.show()

# %% [markdown]
# ## 3. The run's configuration
#
# A `TrainConfig` holds everything: the model (a `TransformerConfig`, here
# a preset with a few fields changed), the data and the length of the run.
# The defaults are the paper's: Adam with $\beta_1 = 0.9$, $\beta_2 = 0.98$,
# $\epsilon = 10^{-9}$, dropout 0.1 and label smoothing 0.1.

# %%
if FAST:
    model_config = {"preset": "tiny", "max_length": 64}
    schedule = {"train_steps": 20, "steps_per_epoch": 10, "bleu_samples": 8}
    schedule.update(test_samples=16, log_every=5)
    warmup = 20
else:
    model_config = {
        "preset": "small",
        "d_model": 128,
        "d_ff": 512,
        "num_heads": 4,
        "max_length": 64,
    }
    schedule = {"train_steps": 2000, "steps_per_epoch": 250, "bleu_samples": 100}
    warmup = 1000

config = training.TrainConfig(
    model={**model_config, "optimizer": {"warmup_steps": warmup}},
    data=training.DataConfig(
        task="multi30k",
        source_language="de",
        target_language="en",
        vocabulary_size=tokenizer.vocabulary_size,
        max_sentence_length=64,
        max_tokens_per_batch=2048 if FAST else 4096,
    ),
    train=training.TrainingConfig(**schedule, num_translations=3, verbose=2),
)
model_settings = config.model
print(
    f"N={model_settings.num_encoder_layers}, d_model={model_settings.d_model}, "
    f"d_ff={model_settings.d_ff}, h={model_settings.num_heads}, "
    f"vocabulary={model_settings.vocabulary_size}, "
    f"{config.train.train_steps} updates of {config.data.max_tokens_per_batch} tokens"
)

# %% [markdown]
# ## 4. The learning-rate schedule (§5.3, Eq. 7)
#
# $$lrate = d_\text{model}^{-0.5} \cdot \min(step\_num^{-0.5},\;
# step\_num \cdot warmup\_steps^{-1.5})$$
#
# The rate grows linearly for the first $warmup\_steps$ updates and then
# decays with the inverse square root of the step. A smaller model gets a
# larger rate ($d_\text{model}^{-0.5}$); our shorter run uses a shorter
# warm-up.

# %%
steps = np.arange(1, max(config.train.train_steps, 20_000))
ours = kt.schedules.NoamSchedule(config.model.d_model, warmup_steps=warmup)
paper = kt.schedules.NoamSchedule(512, warmup_steps=4000)
fig, ax = plt.subplots(figsize=(6, 3))
# Keras counts updates from 0: update `step` uses the rate of schedule(step - 1).
ax.plot(steps, keras.ops.convert_to_numpy(ours(steps - 1)), label="this run")
ax.plot(
    steps,
    keras.ops.convert_to_numpy(paper(steps - 1)),
    label="paper, base: d_model=512, warm-up 4000",
)
ax.axvline(config.train.train_steps, color="gray", ls=":", label="end of this run")
ax.set(xlabel="step", ylabel="learning rate", xscale="log")
ax.legend(fontsize="small")
plt.show()

# %% [markdown]
# ## 5. Training
#
# `training.train(config, workdir)` runs the whole recipe and writes
# everything into the work directory: the config, the tokenizer,
# checkpoints (model and optimizer, so that running the same call again
# resumes the run exactly), TensorBoard logs, and `result.json`. Each epoch
# ends with a checkpoint, the validation loss and the BLEU of greedy
# translations of a validation sample.


# %%
def epoch_lines(line: str) -> None:
    """Prints `train`'s messages but its line of every `train.log_every` updates."""
    if not line.startswith("step "):
        print(line)


start = time.perf_counter()
result = training.train(config, WORKDIR, printer=epoch_lines)
print(f"{result.steps} updates in {time.perf_counter() - start:.0f} s")

# %%
history = result.history
epochs = np.arange(1, len(history["loss"]) + 1)
fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3))
left.plot(epochs, history["loss"], marker="o", label="training")
left.plot(epochs, history["val_loss"], marker="o", label="validation")
left.set(xlabel="epoch", ylabel="label-smoothed loss per token")
left.legend()
right.plot(epochs, history["val_bleu"], marker="o", color="C2")
right.set(xlabel="epoch", ylabel="validation BLEU (greedy)")
plt.show()

# %% [markdown]
# ## 6. BLEU, greedy and beam search (§6.1)
#
# At the end of the run the test set (here `test_2016_flickr`) was translated
# greedily and scored with sacreBLEU on detokenized text, which is how BLEU
# is comparable across papers (the signature records the settings).
#
# The paper decodes with beam search: "beam search with a beam size of 4 and
# length penalty $\alpha = 0.6$". A finished hypothesis $Y$ is ranked by
# $\log P(Y \mid X) / lp(Y)$ with $lp(Y) = ((5 + |Y|) / 6)^\alpha$
# (Wu et al., 2016); outputs may be up to the input length + 50 tokens long.

# %%
evaluation = result.evaluation
print(evaluation.summary())

sample = test_pairs.take(config.train.test_samples or len(test_pairs))
model = result.model


def translate(pairs: kt.data.TextPairs, beam_size: int) -> list[str]:
    """Greedy (beam_size=1) or beam-search translations (alpha = 0.6)."""
    return translation.translate_lines(
        model, tokenizer, list(pairs.sources), beam_size=beam_size, alpha=0.6
    )


start = time.perf_counter()
greedy = translate(sample, beam_size=1)
greedy_seconds = time.perf_counter() - start
start = time.perf_counter()
beam = translate(sample, beam_size=4)
beam_seconds = time.perf_counter() - start
references = [list(sample.targets)]
greedy_bleu = sacrebleu.corpus_bleu(greedy, references)
beam_bleu = sacrebleu.corpus_bleu(beam, references)
print(f"{len(sample)} test sentences")
print(f"greedy:      BLEU {greedy_bleu.score:5.2f}  ({greedy_seconds:.1f} s)")
print(f"beam 4, 0.6: BLEU {beam_bleu.score:5.2f}  ({beam_seconds:.1f} s)")

# %%
for i in range(3):
    print("source:   ", sample.sources[i])
    print("reference:", sample.targets[i])
    print("greedy:   ", greedy[i])
    print("beam:     ", beam[i], "\n")

# %% [markdown]
# ## 7. Where the decoder looks
#
# `visualize.attention_maps` re-runs the model on a source and a target and
# returns every attention weight: encoder self-attention, decoder
# self-attention and encoder-decoder attention, per layer and head. Feeding
# the model's own translation as the target shows, row by row, which source
# subwords each output subword attended to.

# %%
source_text = sample.sources[0]
source_ids = [*tokenizer.encode([source_text])[0], tokenizer.END_ID]
output_ids = (
    decoding.Decoder(model)
    .decode(np.array([source_ids]), decoding.DecodeSettings(beam_size=4), max_length=64)
    .to_list()[0]
)
target_ids = [tokenizer.START_ID, *output_ids[:-1]]  # the decoder's inputs
maps = visualize.attention_maps(model, np.array([source_ids]), np.array([target_ids]))
print({kind: weights.shape for kind, weights in maps.items()})

source_pieces = [tokenizer.id_to_piece(i) for i in source_ids]
output_pieces = [tokenizer.id_to_piece(i) for i in output_ids]
display(visualize.plot_heads(maps, -1, "encoder_decoder", source_pieces, output_pieces))

# %% [markdown]
# ## 8. Export as a SavedModel and reload it
#
# `export.export_translator` writes a TensorFlow SavedModel whose graph does
# the whole job: SentencePiece tokenization, beam search (beam 4,
# $\alpha = 0.6$, outputs up to the input length + 50) and detokenization.
# Loading it needs TensorFlow and `tensorflow_text` (for the SentencePiece
# op) but no code of this package, and TensorFlow Serving serves the folder
# as it is (see `docs/export.md`). The reloaded translator must give the same
# translations as beam search in this process.

# %%
export_dir = WORKDIR / "exported" / "1"  # TensorFlow Serving wants versions
export.export_translator(model, tokenizer, export_dir, overwrite=True)
print(sorted(path.name for path in export_dir.iterdir()))

reloaded = tf.saved_model.load(str(export_dir))
print("signatures:", sorted(reloaded.signatures))
sentences = list(sample.sources[:4])
outputs = reloaded.signatures["serving_default"](sentences=tf.constant(sentences))
exported = [text.decode("utf-8") for text in outputs["translations"].numpy()]
in_process = translation.translate_lines(model, tokenizer, sentences)
for sentence, text in zip(sentences, exported, strict=True):
    print(f"{sentence}\n  -> {text}")
print("same translations as in-process beam search:", exported == in_process)

# %% [markdown]
# The training checkpoints can also be loaded back into a Keras model, with
# the run's tokenizer and config, from the work directory alone:

# %%
restored, restored_tokenizer, restored_config = training.load_trained_model(WORKDIR)
print(translation.translate_lines(restored, restored_tokenizer, [source_text]))

# %% [markdown]
# ## 9. TensorBoard
#
# The run logged its training loss, learning rate, validation loss, BLEU,
# chrF, the hyperparameters and attention images to `<workdir>/logs`. Start
# TensorBoard on it from a terminal:
#
# ```
# tensorboard --logdir runs/translation/logs
# ```
#
# or inside Jupyter with `%load_ext tensorboard` and
# `%tensorboard --logdir runs/translation/logs`.

# %%
for folder in sorted({p.parent for p in result.log_dir.rglob("events.out.tfevents.*")}):
    print(folder.relative_to(result.log_dir.parent))

# %% [markdown]
# The same run from the command line, from the config the run saved (a new
# work directory starts a new run; the same one resumes it):
#
# ```
# keras-transformer train runs/translation/config.json --workdir runs/de_en
# ```
#
# `--set key=value` changes single settings, e.g.
# `--set train.train_steps=6000 --set train.evaluate_with=average`.
