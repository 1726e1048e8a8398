"""Packaging for keras3-transformer (import name: `keras_transformer`).

The distribution is called ``keras3-transformer`` because ``keras-transformer``
on the package index is an older, unrelated Keras 2 package that also
installs a top-level ``keras_transformer`` module.
"""

import re
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent

#: The distribution's name on the package index (`conventions.DISTRIBUTION`).
NAME = "keras3-transformer"
#: One owner: `keras_transformer.__version__`.
VERSION = re.search(
    r'^__version__ = "([^"]+)"$',
    (HERE / "keras_transformer" / "__init__.py").read_text(encoding="utf-8"),
    re.M,
).group(1)

#: What the core needs: layers, models, losses, metrics, schedules, optimizers.
CORE_REQUIRES = [
    "keras>=3.13,<4",
    "numpy>=1.26,<3",
]
#: Training, data, decoding, export, evaluation and the command line.
TRAIN_REQUIRES = [
    "tensorflow>=2.18,<2.22",
    "tensorflow-text>=2.18,<2.22",
    "tensorboard>=2.18,<2.22",
    "sacrebleu>=2.4,<3",
    # The run's fingerprint inside `.weights.h5` files (Keras writes them
    # with h5py; the package adds attributes).
    "h5py>=3.10,<4",
    "sentencepiece>=0.2,<0.3",
    "babel>=2.12,<3",
    "matplotlib>=3.8,<4",
]
#: Image runs on the photographs bundled in scikit-image's wheel (the image
#: kind's default data; nothing is downloaded). Kept out of `train`: it adds
#: SciPy and about 170 MB that translation and classification never read.
IMAGE_REQUIRES = [*TRAIN_REQUIRES, "scikit-image>=0.24,<0.27"]
#: The LiteRT export (`export --format litert`) and its interpreter.
LITERT_REQUIRES = [*TRAIN_REQUIRES, "ai-edge-litert>=2.3,<3"]
#: The JAX backend for the core (CPU wheel).
JAX_REQUIRES = ["jax[cpu]>=0.10,<0.11"]
#: The notebooks of examples/ in JupyterLab (`jupyter lab examples/`).
EXAMPLES_REQUIRES = [
    *IMAGE_REQUIRES,
    "jupyterlab>=4,<5",
    "ipykernel>=6.29,<8",
]
#: benchmarks/: keras-hub's layers are the reference the training step and
#: decoding are measured against.
BENCHMARK_REQUIRES = [*TRAIN_REQUIRES, "keras-hub>=0.21,<0.33"]
#: docs/diagrams/model_figure.py (with Graphviz) and
#: docs/screenshots/take_screenshots.py (with a system Chromium).
PICTURES_REQUIRES = [*TRAIN_REQUIRES, "pydot>=3,<5", "playwright>=1.40,<2"]
#: `keras-transformer export --format ctranslate2` and its translator.
CTRANSLATE2_REQUIRES = ["ctranslate2>=4.5,<5"]
#: Tests, linters, the documentation site and the release tools.
TOOLS_REQUIRES = [
    "pytest>=8,<10",
    "pytest-xdist>=3.5,<4",  # `make test` runs the suite on 3 workers
    # the workers build the shared tiny runs once (tests/shared_builds.py)
    "filelock>=3.12,<4",
    "pytest-cov>=5,<8",  # `make coverage`: line coverage of the package
    "ruff>=0.6,<1",
    "mkdocs>=1.6,<2",
    "mkdocstrings[python]>=0.26,<2",
    "griffelib>=2,<3",  # read by docs/api_hook.py (mkdocstrings-python's parser)
    "mkdocs-jupyter>=0.25,<1",
    # MathJax 3, served by the docs site itself (docs/offline_assets_hook.py);
    # its files need no Django.
    "django-static-mathjax>=3.2,<4",
    "pygments>=2.16,<3",  # colours the docs' code at build time
    "pyyaml>=6,<7",
    "nbclient>=0.10,<1",
    "nbformat>=5.9,<6",
    "build>=1.2,<2",
    "twine>=5,<8",
    "setuptools>=68",  # tests/test_packaging.py reads setup.py with it
]

setup(
    name=NAME,
    version=VERSION,
    description=(
        "The Transformer of 'Attention Is All You Need' as Keras 3 layers, "
        "with training, decoding and export on TensorFlow."
    ),
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["keras_transformer", "keras_transformer.*"]),
    # The core needs only Keras and NumPy and runs on every Keras backend.
    install_requires=CORE_REQUIRES,
    extras_require={
        "train": TRAIN_REQUIRES,
        "image": IMAGE_REQUIRES,
        "all": IMAGE_REQUIRES,
        "jax": JAX_REQUIRES,
        "examples": EXAMPLES_REQUIRES,
        "benchmark": BENCHMARK_REQUIRES,
        "litert": LITERT_REQUIRES,
        "pictures": PICTURES_REQUIRES,
        "ctranslate2": CTRANSLATE2_REQUIRES,
        "dev": sorted(
            {
                *EXAMPLES_REQUIRES,
                *IMAGE_REQUIRES,
                *LITERT_REQUIRES,
                *BENCHMARK_REQUIRES,
                *PICTURES_REQUIRES,
                *JAX_REQUIRES,
                *CTRANSLATE2_REQUIRES,
                *TOOLS_REQUIRES,
            }
        ),
    },
    entry_points={
        "console_scripts": ["keras-transformer=keras_transformer.cli:main"],
    },
    keywords=["keras", "transformer", "attention", "translation", "tensorflow"],
    classifiers=[
        "Programming Language :: Python :: 3",
        "Framework :: Keras",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
