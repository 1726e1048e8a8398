"""Tests of the image data: CIFAR-10 pickles, scikit-image patches, baselines."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy as np
import pytest

from keras_transformer.data.images import (
    SAMPLE_IMAGE_SPLITS,
    check_image_batch,
    cifar10_class_names,
    extract_patches,
    load_cifar10,
    load_sample_patches,
    lossless_bits_per_dim,
)

CLASS_NAMES = [
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
]


def _write_batch(path: Path, images: np.ndarray, labels: list[int]) -> None:
    """A CIFAR-10 batch as the original python pickles: bytes keys, rows of
    the red, green and blue 32 x 32 planes."""
    rows = images.transpose(0, 3, 1, 2).reshape(len(images), -1)
    content = {
        b"batch_label": path.name.encode(),
        b"labels": labels,
        b"data": rows.astype(np.uint8),
        b"filenames": [f"{i}.png".encode() for i in range(len(images))],
    }
    path.write_bytes(pickle.dumps(content, protocol=2))


@pytest.fixture
def cifar_folder(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    written = {}
    for index, name in enumerate(
        [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]
    ):
        images = rng.integers(0, 256, (3, 32, 32, 3)).astype(np.uint8)
        _write_batch(folder / name, images, [index % 10, (index + 1) % 10, 9])
        written[name] = images
    meta = {b"label_names": [n.encode() for n in CLASS_NAMES], b"num_vis": 3072}
    (folder / "batches.meta").write_bytes(pickle.dumps(meta, protocol=2))
    return folder, written


# ------------------------------------------------------------------ CIFAR-10
def test_cifar10_train_and_test_splits(cifar_folder) -> None:
    folder, written = cifar_folder
    train = load_cifar10(folder, "train")
    assert train.images.shape == (15, 32, 32, 3) and train.images.dtype == np.uint8
    expected = np.concatenate([written[f"data_batch_{i}"] for i in range(1, 6)])
    np.testing.assert_array_equal(train.images, expected)
    assert train.labels.tolist()[:6] == [0, 1, 9, 1, 2, 9]
    assert train.class_names == CLASS_NAMES
    test = load_cifar10(folder, "test")
    np.testing.assert_array_equal(test.images, written["test_batch"])
    assert test.labels.dtype == np.int32


def test_cifar10_rows_are_channel_planes(tmp_path: Path) -> None:
    """Byte 0 is red (0, 0), byte 1024 green (0, 0), byte 2048 + 33 blue (1, 1)."""
    folder = tmp_path / "cifar"
    folder.mkdir()
    row = np.zeros(3072, np.uint8)
    row[0], row[1024], row[2048 + 33] = 11, 22, 33
    content = {b"data": row[None], b"labels": [4]}
    (folder / "test_batch").write_bytes(pickle.dumps(content))
    meta = {b"label_names": [n.encode() for n in CLASS_NAMES]}
    (folder / "batches.meta").write_bytes(pickle.dumps(meta))
    image = load_cifar10(folder, "test").images[0]
    assert image[0, 0].tolist() == [11, 22, 0]
    assert image[1, 1].tolist() == [0, 0, 33]
    assert cifar10_class_names(folder)[4] == "deer"


def test_cifar10_errors_name_the_file_and_the_fix(cifar_folder, tmp_path) -> None:
    folder, _ = cifar_folder
    with pytest.raises(FileNotFoundError, match="cifar-10-python.tar.gz"):
        load_cifar10(tmp_path / "nowhere")
    with pytest.raises(ValueError, match=r"split='validation'"):
        load_cifar10(folder, "validation")
    (folder / "data_batch_3").unlink()
    with pytest.raises(FileNotFoundError, match="data_batch_3"):
        load_cifar10(folder, "train")
    (folder / "test_batch").write_bytes(b"not a pickle")
    with pytest.raises(ValueError, match=r"test_batch is not a CIFAR-10 python pickle"):
        load_cifar10(folder, "test")
    (folder / "test_batch").write_bytes(pickle.dumps({b"data": np.zeros((2, 10))}))
    with pytest.raises(ValueError, match=r"no \['labels'\]"):
        load_cifar10(folder, "test")
    bad_shape = {b"data": np.zeros((2, 10), np.uint8), b"labels": [0, 1]}
    (folder / "test_batch").write_bytes(pickle.dumps(bad_shape))
    with pytest.raises(ValueError, match=r"\(n, 3072\).*data.shape=\(2, 10\)"):
        load_cifar10(folder, "test")
    bad_labels = {b"data": np.zeros((1, 3072), np.uint8), b"labels": [10]}
    (folder / "test_batch").write_bytes(pickle.dumps(bad_labels))
    with pytest.raises(ValueError, match=r"labels outside 0..9"):
        load_cifar10(folder, "test")
    bad_values = {b"data": np.full((1, 3072), 300), b"labels": [1]}
    (folder / "test_batch").write_bytes(pickle.dumps(bad_values))
    with pytest.raises(ValueError, match=r"outside \[0, 255\].*300"):
        load_cifar10(folder, "test")


# -------------------------------------------------------------------- patches
def test_extract_patches_against_slicing() -> None:
    image = np.arange(6 * 8 * 3).reshape(6, 8, 3)
    patches = extract_patches(image, 4, 2)
    assert patches.shape == (2 * 3, 4, 4, 3)
    np.testing.assert_array_equal(patches[4], image[2:6, 2:6])
    tiles = extract_patches(image, 3, 3)
    assert tiles.shape == (2 * 2, 3, 3, 3)
    np.testing.assert_array_equal(tiles[3], image[3:6, 3:6])
    with pytest.raises(ValueError, match=r"size=7. Choose size <= 6"):
        extract_patches(image, 7, 1)
    with pytest.raises(ValueError, match=r"stride=0"):
        extract_patches(image, 2, 0)


def test_sample_patches_hold_out_whole_photographs() -> None:
    data = load_sample_patches(patch_size=32, train_stride=16)
    for split in (data.train, data.validation, data.test):
        assert split.images.dtype == np.uint8
        assert split.images.shape[1:] == (32, 32, 3)
        assert len(split.sources) == len(split)
    names = {
        name: set(getattr(data, name).sources)
        for name in ("train", "validation", "test")
    }
    assert names["train"] == set(SAMPLE_IMAGE_SPLITS["train"])
    assert not names["train"] & names["validation"]
    assert not names["train"] & names["test"]
    assert not names["validation"] & names["test"]
    # The test photograph (coffee, 400 x 600) is tiled without overlap.
    assert len(data.test) == (400 // 32) * (600 // 32)
    # No test patch equals any training patch.
    train = {patch.tobytes() for patch in data.train.images}
    assert not any(patch.tobytes() in train for patch in data.test.images)


def test_a_photograph_in_two_splits_is_refused() -> None:
    splits = {
        "train": ("astronaut",),
        "validation": ("astronaut",),
        "test": ("coffee",),
    }
    with pytest.raises(ValueError, match="'astronaut' is in both"):
        load_sample_patches(splits=splits)
    with pytest.raises(ValueError, match="Unknown scikit-image sample image"):
        load_sample_patches(
            splits={"train": ("no_such",), "validation": (), "test": ()}
        )


# ------------------------------------------------------------------ baselines
def test_png_bits_per_dim_is_the_file_size() -> None:
    from PIL import Image

    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (3, 16, 16, 3)).astype(np.uint8)
    sizes = []
    for image in images:
        buffer = io.BytesIO()
        Image.fromarray(image).save(
            buffer, format="PNG", optimize=True, compress_level=9
        )
        sizes.append(len(buffer.getvalue()))
    expected = 8.0 * sum(sizes) / images.size
    assert lossless_bits_per_dim(images, "png") == pytest.approx(expected)
    # Noise does not compress (more than 8 bits with the headers); a flat
    # image does.
    assert expected > 8.0
    flat = np.full((1, 32, 32, 3), 128, np.uint8)
    assert lossless_bits_per_dim(flat) < 1.0


def test_webp_is_lossless_when_available() -> None:
    from PIL import features

    if not features.check("webp"):
        with pytest.raises(ValueError, match="no WebP support"):
            lossless_bits_per_dim(np.zeros((1, 8, 8, 3), np.uint8), "WEBP")
        return
    from PIL import Image

    image = np.random.default_rng(2).integers(0, 256, (16, 16, 3)).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="WEBP", lossless=True, quality=100)
    decoded = np.asarray(Image.open(io.BytesIO(buffer.getvalue())).convert("RGB"))
    np.testing.assert_array_equal(decoded, image)
    assert lossless_bits_per_dim(image, "webp") > 0


@pytest.mark.parametrize(
    ("images", "kwargs", "match"),
    [
        (np.zeros((1, 8, 8, 3), np.float32), {}, r"images.dtype=float32"),
        (np.full((1, 8, 8, 3), 256), {}, r"to 256 in images"),
        (np.zeros((1, 8, 8, 3), np.uint8), {"image_format": "JPEG"}, r"'JPEG'"),
    ],
)
def test_bad_baseline_input_raises(images, kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        lossless_bits_per_dim(images, **kwargs)


def test_check_image_batch() -> None:
    with pytest.raises(ValueError, match=r"images\[None\]"):
        check_image_batch("images", np.zeros((8, 8, 3), np.uint8))
    with pytest.raises(ValueError, match=r"shape \(4, 4, 3\).*Crop or resize"):
        check_image_batch("images", np.zeros((1, 8, 8, 3), np.uint8), (4, 4, 3))
