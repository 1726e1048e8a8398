"""LiteRT vs SavedModel: sizes, batch-1 p50, identical greedy outputs.

(Not named ``litert.py``: TensorFlow's LiteRT wrapper imports a top-level
``litert`` module, which a script of that name in ``sys.path[0]`` would shadow.)

Run from the repository root::

    PYTHONPATH=. TF_NUM_INTEROP_THREADS=1 TF_NUM_INTRAOP_THREADS=1 \
        python benchmarks/litert_latency.py
    # a trained translation run, on the first 50 lines of a source file:
    PYTHONPATH=. TF_NUM_INTEROP_THREADS=1 TF_NUM_INTRAOP_THREADS=1 \
        python benchmarks/litert_latency.py --workdir runs/m30k_fast \
        --input ../shared/data/multi30k/test_2016_flickr.de.gz

Greedy decoding in all three (the SavedModel exported with beam_size=1):
`--sentences` lines (default 50; without `--workdir`, synthetic dates on the
tiny dates model of the tests) one at a time after 3 warm-up calls; the
interpreter with one thread.
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import tensorflow as tf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from keras_transformer import export  # noqa: E402
from keras_transformer.data import synthetic_dates  # noqa: E402
from keras_transformer.export import litert  # noqa: E402
from tests.test_export import tiny_translator  # noqa: E402


def _bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def _p50_ms(translate: Callable[[str], object], lines: list[str]) -> float:
    for line in lines[:3]:
        translate(line)
    times = []
    for line in lines:
        start = time.perf_counter()
        translate(line)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def _read(path: str, count: int) -> list[str]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as file:
        return [line.rstrip("\n") for _, line in zip(range(count), file, strict=False)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", help="a trained translation run")
    parser.add_argument("--weights", default="last")
    parser.add_argument("--input", help="source lines (.gz read too); with --workdir")
    parser.add_argument("--sentences", type=int, default=50)
    args = parser.parse_args()
    if args.workdir is None:
        model, tokenizer = tiny_translator()
        lines = synthetic_dates(args.sentences, seed=9).sources
    else:
        if args.input is None:
            parser.error("--workdir needs --input, the source lines to translate")
        from keras_transformer.translation import load_translator

        model, tokenizer = load_translator(args.workdir, args.weights)
        lines = _read(args.input, args.sentences)
    root = Path(tempfile.mkdtemp())
    saved = root / "saved" / "1"
    export.export_translator(model, tokenizer, saved, beam_size=1)
    graph = _bytes(saved / "variables") + (saved / "saved_model.pb").stat().st_size
    print(f"SavedModel: saved_model.pb + variables {graph} bytes")
    signature = tf.saved_model.load(str(saved)).signatures["translate"]

    def run_saved(line: str) -> str:
        return signature(tf.constant([line]))["translations"].numpy()[0].decode()

    reference = [run_saved(line) for line in lines]
    print(f"SavedModel batch-1 p50 {_p50_ms(run_saved, lines):.2f} ms")
    for quantization in litert.QUANTIZATIONS:
        path = litert.export_litert(
            model, tokenizer, root / quantization, quantization=quantization
        )
        translator = litert.LiteRTTranslator(path, num_threads=1)
        outputs = translator.translate(lines)
        same = sum(a == b for a, b in zip(outputs, reference, strict=True))
        size = (path / litert.MODEL_FILE).stat().st_size
        p50 = _p50_ms(lambda line, t=translator: t.translate([line]), lines)
        print(
            f"LiteRT {quantization}: {size} bytes, batch-1 p50 {p50:.2f} ms, "
            f"{same}/{len(lines)} identical to the SavedModel"
        )


if __name__ == "__main__":
    main()
