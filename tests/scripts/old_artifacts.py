"""What an earlier revision wrote still loads here, and translates the same.

    python tests/scripts/old_artifacts.py --revision 4ab62fe

1. Extracts the revision's package with ``git archive`` into a temporary
   folder.
2. With that code (first on ``PYTHONPATH``, in a subprocess): trains the
   dates task for a few updates (a run folder), exports the run (a
   SavedModel with ``model.keras`` beside it), and writes what the old code
   makes of a few sentences: the ``translate`` command's output, the
   SavedModel's translations and the ``.keras`` model's logits.
3. With this checkout's package: the ``translate`` command on the old run
   folder and the old SavedModel (loaded with ``tf.saved_model.load``) give
   the same translations, and the model rebuilt from the old run folder the same
   logits as the old ``model.keras`` (which this code refuses: its layers
   hold the arguments of before `AttentionSettings`, see the CHANGELOG);
   training the old run for more updates resumes from its last checkpoint.

Prints one line per check and exits with 1 when one fails. The tests run it
(slow) against the revision before the package's layout changed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SENTENCES = ["5 January 2023", "le 3 mars 1999", "12. Oktober 1987", "", "2001"]
STEPS = 30

#: Run with the old package: train, export, and record what it makes.
OLD_SIDE = """
import json, subprocess, sys
from pathlib import Path
import numpy as np

work = Path(sys.argv[1])
sentences = json.loads(sys.argv[2])
steps = sys.argv[3]
cli = [sys.executable, "-m", "keras_transformer"]
subprocess.run(
    [*cli, "train", "configs/dates_tiny.json", "--workdir", str(work / "run"),
     "--set", f"train.train_steps={steps}", "--set", "train.steps_per_epoch=10",
     "--set", "model.optimizer.warmup_steps=10", "--set", "train.test_samples=20",
     "--set", "train.bleu_samples=10"],
    check=True, stdout=subprocess.DEVNULL,
)
subprocess.run(
    [*cli, "export", "--workdir", str(work / "run"), "--output", str(work / "export")],
    check=True, stdout=subprocess.DEVNULL,
)
translated = subprocess.run(
    [*cli, "translate", "--workdir", str(work / "run"), "--beam-size", "4"],
    input="\\n".join(sentences) + "\\n", text=True, capture_output=True, check=True,
).stdout.splitlines()

import keras
import tensorflow as tf
import tensorflow_text  # registers the SentencePiece op (a lazy package does not)
import keras_transformer as kt
import keras_transformer.layers  # registers the layers of model.keras

saved = tf.saved_model.load(str(work / "export"))
exported = saved.signatures["serving_default"](sentences=tf.constant(sentences))
model = keras.saving.load_model(work / "export" / "model.keras")
source = np.array([[5, 9, 14, 3, 0, 0]], "int32")
target = np.array([[2, 7, 11, 0]], "int32")
np.save(work / "logits.npy", np.asarray(model([source, target], training=False)))
(work / "old.json").write_text(json.dumps({
    "translate": translated,
    "saved_model": [t.decode() for t in exported["translations"].numpy()],
    "scores": exported["scores"].numpy().tolist(),
}))
"""

#: Run with this checkout's package on what the old one wrote.
NEW_SIDE = """
import json, subprocess, sys
from pathlib import Path
import numpy as np

work = Path(sys.argv[1])
sentences = json.loads(sys.argv[2])
steps = int(sys.argv[3])
old = json.loads((work / "old.json").read_text())
cli = [sys.executable, "-m", "keras_transformer"]
results = {}
translated = subprocess.run(
    [*cli, "translate", "--workdir", str(work / "run"), "--beam-size", "4"],
    input="\\n".join(sentences) + "\\n", text=True, capture_output=True, check=True,
).stdout.splitlines()
results["the translate command on the old run folder"] = translated == old["translate"]

import keras
import tensorflow as tf
import tensorflow_text  # noqa: F401 - registers the SentencePiece op of the graph
import keras_transformer as kt

saved = tf.saved_model.load(str(work / "export"))
exported = saved.signatures["serving_default"](sentences=tf.constant(sentences))
results["the old SavedModel"] = (
    [t.decode() for t in exported["translations"].numpy()] == old["saved_model"]
    and np.allclose(exported["scores"].numpy(), old["scores"], atol=1e-5)
)
kt.models  # registers the layers
# A model.keras of code before AttentionSettings holds the old layer
# arguments and does not load (CHANGELOG, "Changed"); the model rebuilt from
# the run folder with the exported (last) weights gives the same logits.
try:
    keras.saving.load_model(work / "export" / "model.keras", safe_mode=True)
    refused = False
except (TypeError, ValueError):
    refused = True
folder = kt.runs.RunFolder(work / "run")
model = folder.build_model()
folder.restore(model, "last")
source = np.array([[5, 9, 14, 3, 0, 0]], "int32")
target = np.array([[2, 7, 11, 0]], "int32")
logits = np.asarray(model([source, target], training=False))
results["the old model.keras is refused; rebuilt from its run, the same logits"] = (
    refused and bool(np.allclose(logits, np.load(work / "logits.npy"), atol=1e-5))
)
resumed = subprocess.run(
    [*cli, "train", str(work / "run" / "config.json"), "--workdir", str(work / "run"),
     "--set", f"train.train_steps={steps + 10}"],
    capture_output=True, text=True,
)
results["training the old run further resumes it"] = (
    resumed.returncode == 0 and f"from step {steps}" in resumed.stdout
)
if resumed.returncode:
    print(resumed.stderr[-2000:], file=sys.stderr)
print(json.dumps(results))
"""


def run_python(code: str, tree: Path, *args: str) -> str:
    """Runs `code` with `tree`'s package first on the path; its stdout."""
    environment = dict(os.environ)
    environment["PYTHONPATH"] = str(tree)
    environment.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    environment["KERAS_BACKEND"] = "tensorflow"
    environment["KT_DATA_DIR"] = environment.get(
        "KT_DATA_DIR", str(REPO.parent / "shared" / "data")
    )
    completed = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=tree,
        env=environment,
        capture_output=True,
        text=True,
    )
    if completed.returncode:
        raise RuntimeError(
            f"failed with the package of {tree}:\n{completed.stderr[-4000:]}"
        )
    return completed.stdout


def check(revision: str) -> dict[str, bool]:
    """Writes artifacts with `revision`, reads them with this checkout."""
    with tempfile.TemporaryDirectory() as folder:
        old_tree, work = Path(folder) / "old", Path(folder) / "work"
        old_tree.mkdir()
        work.mkdir()
        archive = subprocess.run(
            ["git", "archive", revision, "keras_transformer", "configs"],
            cwd=REPO,
            capture_output=True,
            check=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(old_tree)], input=archive, check=True)
        sentences = json.dumps(SENTENCES)
        run_python(OLD_SIDE, old_tree, str(work), sentences, str(STEPS))
        output = run_python(NEW_SIDE, REPO, str(work), sentences, str(STEPS))
        return json.loads(output.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--revision", required=True, help="a git revision of this repository"
    )
    args = parser.parse_args()
    results = check(args.revision)
    for what, held in results.items():
        print(f"{'ok  ' if held else 'FAIL'} {what} (written by {args.revision})")
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
