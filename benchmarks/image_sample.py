"""Image sampling speed: `ImageSampler.complete` in a graph and with XLA.

On randomly initialised DMOL models (one pixel per position, a search step
per intensity, the model run at each pixel's first channel; Parmar et al.
2018, §3.4 and §5), it times completing a batch of images from no given
rows:

* "tiny": 8 x 8 x 3, 2 layers, d_model 16, local 2d attention;
* "patches": the model of `configs/image_sample_patches.json` (32 x 32 x 3,
  4 layers, d_model 64, local 2d attention, 5 mixtures).

After one call of each case that traces / compiles it ("first s"),
`--repeats` rounds run every case once, interleaved so that a busy machine
slows all of them alike; "best s" is the best round. To compare two
revisions run it through `benchmarks/compare_revisions.py`.

Usage:
    python benchmarks/image_sample.py             # both models
    python benchmarks/image_sample.py --quick     # the tiny model only
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import keras
import numpy as np

from keras_transformer.image_sampling import ImageSampler
from keras_transformer.models import ImageTransformerConfig, build_image_transformer

CONFIG = Path(__file__).resolve().parents[1] / "configs/image_sample_patches.json"
TINY = {
    "image_shape": (8, 8, 3),
    "output": "dmol",
    "attention": "local_2d",
    "query_block": (2, 2),
    "memory_flange": (1, 1),
    "num_layers": 2,
    "d_model": 16,
    "d_ff": 32,
    "num_heads": 2,
    "num_mixtures": 2,
    "dropout": 0.0,
}


def patches_config() -> dict:
    """The model settings of `configs/image_sample_patches.json`."""
    values = json.loads(CONFIG.read_text())["model"]
    values.pop("optimizer", None)
    return {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="the tiny model only")
    args = parser.parse_args()
    models = {"tiny": TINY} if args.quick else {"tiny": TINY, "patches": None}
    cases = {}
    for name, values in models.items():
        keras.utils.set_random_seed(0)
        config = ImageTransformerConfig(**(values or patches_config()))
        model = build_image_transformer(config)
        images = np.zeros((args.batch, *config.image_shape), "int32")
        for jit_compile in (False, True):
            sampler = ImageSampler(model, jit_compile=jit_compile)
            start = time.perf_counter()
            sampler.complete(images, 0, temperature=1.0, seed=0)
            first = time.perf_counter() - start
            label = f"{name} {'xla' if jit_compile else 'graph'}"
            cases[label] = (sampler, images, first, [])
    for _ in range(args.repeats):
        for sampler, images, _, times in cases.values():
            start = time.perf_counter()
            sampler.complete(images, 0, temperature=1.0, seed=0)
            times.append(time.perf_counter() - start)
    print(f"batch {args.batch}, best of {args.repeats}")
    print(f"{'case':14s} {'first s':>8s} {'best s':>8s}")
    for label, (_, _, first, times) in cases.items():
        print(f"{label:14s} {first:8.2f} {min(times):8.3f}")


if __name__ == "__main__":
    main()
