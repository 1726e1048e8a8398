"""The three commands of docs/how-to/own-data.md, run on a small file of pairs.

The commands are read from the how-to itself. The file is 6,000 pairs of
the synthetic dates task (dates in six languages -> ISO 8601) written as a
TSV file, a task a tiny model learns in a few hundred updates, so the test
can ask for a real score. To run in about a minute the train command gets
`--preset tiny` instead of `small` and a few settings more (last on the
command line, so they win); everything else is as documented.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HOW_TO = REPO / "docs" / "how-to" / "own-data.md"
#: What makes the documented train command fit a test.
QUICK = [
    "--set=train.train_steps=300",
    "--set=train.steps_per_epoch=300",
    "--set=data.vocabulary_size=500",
    "--set=data.max_sentence_length=32",
    "--set=data.bucket_boundaries=[8,12,16,24,32]",
    "--set=data.max_tokens_per_batch=2048",
    "--set=model.max_length=64",
    "--set=model.optimizer.warmup_steps=300",
    "--set=train.bleu_samples=50",
    "--set=train.verbose=0",
]


def documented_commands() -> list[list[str]]:
    """The shell block of "In three commands", one argument list per command."""
    section = HOW_TO.read_text(encoding="utf-8").split("## In three commands", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [shlex.split(line) for line in block.replace("\\\n", " ").splitlines()]


def test_the_how_to_has_three_keras_transformer_commands() -> None:
    commands = documented_commands()
    assert [words[:2] for words in commands] == [
        ["keras-transformer", "train"],
        ["keras-transformer", "evaluate"],
        ["keras-transformer", "export"],
    ]
    train = commands[0]
    assert "--set" in train and "data.held_out_pairs=500" in train
    assert "data.train_source=pairs.tsv" in train


@pytest.mark.slow
def test_own_tsv_file_to_bleu_and_a_saved_model(tmp_path: Path) -> None:
    from keras_transformer.data import synthetic_dates

    pairs = synthetic_dates(6000, seed=5)
    lines = [f"{s}\t{t}" for s, t in zip(pairs.sources, pairs.targets, strict=True)]
    (tmp_path / "pairs.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")

    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO)}
    outputs = []
    for words in documented_commands():
        words = ["tiny" if word == "small" else word for word in words]
        words = words + (QUICK if words[1] == "train" else [])
        # `python -m keras_transformer` is the installed `keras-transformer`.
        command = [sys.executable, "-m", "keras_transformer", *words[1:]]
        done = subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
        )
        assert done.returncode == 0, f"{shlex.join(words)}\n{done.stderr[-4000:]}"
        outputs.append(done.stdout)
    _, evaluated, exported = outputs

    config = json.loads((tmp_path / "runs/mine/config.json").read_text())
    assert config["data"]["held_out_pairs"] == 500
    print(evaluated)
    bleu = float(re.search(r"BLEU (\d+\.\d+)", evaluated).group(1))
    assert bleu > 80, evaluated  # 98.5 when written
    hypotheses = tmp_path / "runs/mine/translations/test.beam4.last.txt"
    translations = hypotheses.read_text(encoding="utf-8").splitlines()
    assert "serving_default" in exported

    # The SavedModel, in a fresh process with only TensorFlow, translates
    # the held-out test sentences as `evaluate` did.
    from keras_transformer.data.tasks import held_out_splits

    splits = held_out_splits(pairs.sources, 500)
    test_sources = [
        s for s, split in zip(pairs.sources, splits, strict=True) if split == "test"
    ]
    assert len(translations) == len(test_sources) >= 500
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, sys, tensorflow as tf, tensorflow_text\n"
            "model = tf.saved_model.load(sys.argv[1])\n"
            "out = model.translate(tf.constant(json.loads(sys.stdin.read())))\n"
            "print(json.dumps([t.decode() for t in out['translations'].numpy()]))",
            str(tmp_path / "exported/mine/1"),
        ],
        input=json.dumps(test_sources[:20]),
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in env.items() if k != "PYTHONPATH"},
    )
    assert child.returncode == 0, child.stderr[-3000:]
    assert json.loads(child.stdout.splitlines()[-1]) == translations[:20]
