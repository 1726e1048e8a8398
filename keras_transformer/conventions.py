"""Conventions that every part of the package shares, each defined once.

Special token ids: the tokenizer reserves them, the model masks `PAD_ID`,
the trainer ignores it in the loss, and decoding starts from `START_ID` and
stops at `END_ID`.

`EXTRA_LENGTH` is the output-length allowance of §6.1: "we set the maximum
output length during inference to input length + 50, but terminate early
when possible". Everything that decodes (validation, `evaluate`,
`translate`, exported SavedModels) takes it under the one name
`extra_length`.

Pure Python: importing it needs neither Keras nor TensorFlow.
"""

#: Padding: masked in attention, ignored by the loss and the metrics.
PAD_ID = 0
#: Characters the subword vocabulary never saw.
UNK_ID = 1
#: `<s>`, the first decoder input (the target shifted right).
START_ID = 2
#: `</s>`, ends every target sentence and stops decoding.
END_ID = 3

#: Tokens allowed beyond the source length when decoding (§6.1).
EXTRA_LENGTH = 50
#: Beam search's stopping rules (`DecodeSettings.early_stop`): §6.1's
#: "terminate early when possible", exactly or by a heuristic.
EARLY_STOPS = ("exact", "heuristic")
#: `epsilon_ls` of §5.4: "label smoothing of value epsilon_ls = 0.1" (the
#: default of `train.label_smoothing`, and of the loss's `label_smoothing`).
LABEL_SMOOTHING = 0.1
#: Longest source when translating, in subword ids including END: longer
#: sources keep their first ``DEFAULT_MAX_INPUT_LENGTH - 1`` tokens.
DEFAULT_MAX_INPUT_LENGTH = 128
#: Keras dtype policies a run may train with (`train.precision`).
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
#: `tf.distribute` strategies by name (`training.make_strategy`).
STRATEGIES = ("default", "mirrored", "multiworker")

#: The data sets `keras-transformer train` knows (`data.task`); what each
#: one loads is registered in `keras_transformer.data.tasks`.
TASK_NAMES = ("dates", "multi30k", "tatoeba", "files")

#: The package's name on the package index, for install commands
#: (``pip install "keras3-transformer[train]"``); it imports as
#: ``keras_transformer``. (``keras-transformer`` on the index is an older,
#: unrelated Keras 2 package with the same import name.)
DISTRIBUTION = "keras3-transformer"

__all__ = [
    "DEFAULT_MAX_INPUT_LENGTH",
    "DISTRIBUTION",
    "EARLY_STOPS",
    "END_ID",
    "EXTRA_LENGTH",
    "LABEL_SMOOTHING",
    "PAD_ID",
    "PRECISIONS",
    "START_ID",
    "STRATEGIES",
    "TASK_NAMES",
    "UNK_ID",
]
