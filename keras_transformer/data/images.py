"""Images for the Image Transformer: CIFAR-10, natural-image patches, baselines.

- `load_cifar10(directory, split)`: CIFAR-10 from a local folder of the
  standard python-pickle batches (``data_batch_1`` .. ``data_batch_5``,
  ``test_batch``, ``batches.meta``, as in ``cifar-10-batches-py``).
- `load_sample_patches()`: 32 x 32 RGB patches of the natural photographs
  that ship inside the scikit-image wheel (no download), split by *whole
  image*: the validation and test photographs are never cut into training
  patches, so no held-out patch overlaps a training one.
- `lossless_bits_per_dim(images, "PNG")`: what a lossless codec (PNG,
  WebP-lossless) spends per intensity on the same images, the baseline the
  model's bits per dimension are compared with.

Every image is `uint8` `(height, width, channels)`, batches `(n, height,
width, channels)`.
"""

from __future__ import annotations

import dataclasses
import io
import os
import pickle
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from keras_transformer.conventions import DISTRIBUTION
from keras_transformer.validation import check_positive_int

__all__ = [
    "CIFAR10_FILES",
    "SAMPLE_IMAGE_SPLITS",
    "ImageData",
    "ImageSplit",
    "check_image_batch",
    "cifar10_class_names",
    "extract_patches",
    "load_cifar10",
    "load_sample_images",
    "load_sample_patches",
    "lossless_bits_per_dim",
]

#: The files of each CIFAR-10 split in ``cifar-10-batches-py``.
CIFAR10_FILES = {
    "train": tuple(f"data_batch_{i}" for i in range(1, 6)),
    "test": ("test_batch",),
}
CIFAR10_META = "batches.meta"
_CIFAR10_SIDE, _CIFAR10_CHANNELS = 32, 3

#: The scikit-image photographs of each split (`skimage.data.<name>`), all
#: RGB and bundled in the wheel. The two views of the stereo motorcycle are
#: both in training, so the held-out photographs share no scene with it.
SAMPLE_IMAGE_SPLITS: dict[str, tuple[str, ...]] = {
    "train": (
        "astronaut",
        "rocket",
        "motorcycle_left",
        "motorcycle_right",
        "immunohistochemistry",
    ),
    "validation": ("chelsea",),
    "test": ("coffee",),
}


@dataclasses.dataclass
class ImageSplit:
    """Images of one split, with their classes and where they come from.

    Attributes:
        images: `uint8` `(n, height, width, channels)`.
        labels: `int32` `(n,)` classes, or `None`.
        sources: for patches, the photograph each patch was cut from.
        class_names: the names of the classes, if known.
    """

    images: np.ndarray
    labels: np.ndarray | None = None
    sources: list[str] | None = None
    class_names: list[str] | None = None

    def __len__(self) -> int:
        return len(self.images)

    def take(self, count: int) -> ImageSplit:
        """The first `count` images."""
        return ImageSplit(
            self.images[:count],
            None if self.labels is None else self.labels[:count],
            None if self.sources is None else self.sources[:count],
            self.class_names,
        )


@dataclasses.dataclass
class ImageData:
    """The train, validation and test splits of an image data set."""

    train: ImageSplit
    validation: ImageSplit
    test: ImageSplit


def check_image_batch(
    name: str, images: Any, image_shape: Sequence[int] | None = None
) -> np.ndarray:
    """Raises `ValueError` unless `images` is `(n, height, width, channels)`
    integer intensities in [0, 255] (of `image_shape` when given).

    Returns:
        the images as a NumPy array.
    """
    from keras_transformer.layers.pixel_outputs import check_pixels

    images = check_pixels(name, np.asarray(images))
    if images.ndim != 4:
        raise ValueError(
            f"`{name}` must be a batch of images (n, height, width, channels). "
            f"Received: {name}.shape={images.shape}. Add the batch axis with "
            f"{name}[None] for one image."
        )
    if image_shape is not None and tuple(images.shape[1:]) != tuple(image_shape):
        raise ValueError(
            f"`{name}` must be images of shape {tuple(image_shape)}. Received: "
            f"{name}.shape={images.shape}. Crop or resize them to "
            f"{tuple(image_shape)}, or build the model for their shape."
        )
    return images


# ------------------------------------------------------------------ CIFAR-10
def _folder(directory: str | os.PathLike[str]) -> Path:
    folder = Path(directory)
    if not folder.is_dir():
        raise FileNotFoundError(
            f"CIFAR-10 folder not found: {folder}. Download and unpack "
            "cifar-10-python.tar.gz (https://www.cs.toronto.edu/~kriz/cifar.html) "
            "and pass its cifar-10-batches-py folder."
        )
    return folder


def _unpickle(path: Path) -> dict[Any, Any]:
    if not path.is_file():
        raise FileNotFoundError(
            f"CIFAR-10 file missing: {path}. The folder must hold data_batch_1 "
            "... data_batch_5, test_batch and batches.meta (cifar-10-batches-py)."
        )
    try:
        with path.open("rb") as file:
            content = pickle.load(file, encoding="bytes")
    except Exception as e:  # noqa: BLE001 - any unreadable file is the same problem
        raise ValueError(
            f"{path} is not a CIFAR-10 python pickle ({type(e).__name__}: {e}). "
            "Use the files of cifar-10-python.tar.gz, not the binary or "
            "MATLAB versions."
        ) from e
    if not isinstance(content, dict):
        raise ValueError(
            f"{path} does not hold a CIFAR-10 batch: expected a dict, found "
            f"{type(content).__name__}."
        )
    # Keys are bytes in the original files, str in some re-pickled copies.
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in content.items()}


def _read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    batch = _unpickle(path)
    missing = [key for key in ("data", "labels") if key not in batch]
    if missing:
        raise ValueError(
            f"{path} is not a CIFAR-10 batch: it has no {missing} entries "
            f"(found {sorted(map(str, batch))})."
        )
    data = np.asarray(batch["data"])
    labels = np.asarray(batch["labels"], dtype=np.int64)
    row = _CIFAR10_SIDE * _CIFAR10_SIDE * _CIFAR10_CHANNELS
    if data.ndim != 2 or data.shape[1] != row or data.shape[0] != labels.shape[0]:
        raise ValueError(
            f"{path}: expected data of shape (n, {row}) and n labels, found "
            f"data.shape={data.shape} and {labels.shape[0]} labels."
        )
    if data.dtype != np.uint8:
        if data.size and (data.min() < 0 or data.max() > 255):
            raise ValueError(
                f"{path}: intensities outside [0, 255] (from {data.min()} to "
                f"{data.max()})."
            )
        data = data.astype(np.uint8)
    if labels.size and (labels.min() < 0 or labels.max() > 9):
        raise ValueError(
            f"{path}: labels outside 0..9 (from {labels.min()} to {labels.max()})."
        )
    # Rows are the red, green and blue planes of 32 x 32, row-major:
    # (n, 3, 32, 32) -> (n, 32, 32, 3).
    images = data.reshape(-1, _CIFAR10_CHANNELS, _CIFAR10_SIDE, _CIFAR10_SIDE)
    return images.transpose(0, 2, 3, 1), labels.astype(np.int32)


def cifar10_class_names(directory: str | os.PathLike[str]) -> list[str]:
    """The ten class names of ``batches.meta`` ("airplane", ..., "truck")."""
    meta = _unpickle(_folder(directory) / CIFAR10_META)
    names = meta.get("label_names")
    if names is None:
        raise ValueError(f"{Path(directory) / CIFAR10_META} has no label_names entry.")
    return [n.decode() if isinstance(n, bytes) else str(n) for n in names]


def load_cifar10(directory: str | os.PathLike[str], split: str = "train") -> ImageSplit:
    """CIFAR-10 from a local ``cifar-10-batches-py`` folder.

    Args:
        directory: the folder holding ``data_batch_1`` .. ``data_batch_5``,
            ``test_batch`` and ``batches.meta`` (python pickles).
        split: ``"train"`` (the five training batches, 50,000 images) or
            ``"test"`` (10,000 images).

    Returns:
        an `ImageSplit`: `uint8` `(n, 32, 32, 3)` images, `int32` labels
        0..9 and the class names.

    Raises:
        FileNotFoundError: a missing folder or file, named.
        ValueError: an unknown split, or a file that is not a CIFAR-10 batch.

    Reference: Krizhevsky (2009), "Learning Multiple Layers of Features from
    Tiny Images"; the data set of Parmar et al. (2018), §5.
    """
    if split not in CIFAR10_FILES:
        raise ValueError(
            f"`split` must be one of {tuple(CIFAR10_FILES)}. Received: split={split!r}"
        )
    folder = _folder(directory)
    batches = [_read_batch(folder / name) for name in CIFAR10_FILES[split]]
    images = np.concatenate([images for images, _ in batches])
    labels = np.concatenate([labels for _, labels in batches])
    return ImageSplit(images, labels, class_names=cifar10_class_names(folder))


# ---------------------------------------------------- natural-image patches
def load_sample_images(names: Sequence[str]) -> dict[str, np.ndarray]:
    """Photographs bundled with scikit-image, by name, as `uint8` RGB arrays.

    `"motorcycle_left"` and `"motorcycle_right"` are the two views of
    `skimage.data.stereo_motorcycle`; every other name is a function of
    `skimage.data`. The files are inside the wheel: nothing is downloaded.

    Raises:
        ModuleNotFoundError: without scikit-image (the `image` extra).
        ValueError: an unknown name, or an image that is not RGB.
    """
    try:
        import skimage.data
    except ImportError as e:
        raise ModuleNotFoundError(
            "The sample photographs come with scikit-image, which the `image` "
            f"extra installs: pip install '{DISTRIBUTION}[image]'",
            name="skimage",
        ) from e
    found = {}
    for name in names:
        if name in ("motorcycle_left", "motorcycle_right"):
            left, right, _ = skimage.data.stereo_motorcycle()
            image = left if name == "motorcycle_left" else right
        else:
            loader = getattr(skimage.data, name, None)
            if loader is None or not callable(loader):
                raise ValueError(
                    f"Unknown scikit-image sample image: {name!r}. Use a function "
                    "of skimage.data, e.g. 'astronaut' or 'coffee'."
                )
            image = loader()
        image = np.asarray(image)
        if image.ndim != 3 or image.shape[-1] != 3 or image.dtype != np.uint8:
            raise ValueError(
                f"skimage.data.{name} is not an 8-bit RGB image "
                f"(shape {image.shape}, dtype {image.dtype})."
            )
        found[name] = image
    return found


def extract_patches(image: np.ndarray, size: int, stride: int) -> np.ndarray:
    """Square patches of `image`, top-left corners every `stride` pixels.

    Args:
        image: `(height, width, channels)`.
        size: the patch side, at most the image's smaller side.
        stride: the step between patches (`size`: a non-overlapping tiling
            of the top-left `floor(h / size) x floor(w / size)` patches).

    Returns:
        `(n, size, size, channels)` in raster order of the corners.
    """
    check_positive_int("size", size)
    check_positive_int("stride", stride)
    image = np.asarray(image)
    height, width = image.shape[:2]
    if size > min(height, width):
        raise ValueError(
            f"`size` is larger than the image ({height} x {width}). Received: "
            f"size={size}. Choose size <= {min(height, width)}."
        )
    patches = [
        image[top : top + size, left : left + size]
        for top in range(0, height - size + 1, stride)
        for left in range(0, width - size + 1, stride)
    ]
    return np.stack(patches)


def load_sample_patches(
    patch_size: int = 32,
    train_stride: int = 16,
    splits: dict[str, Sequence[str]] | None = None,
) -> ImageData:
    """Patches of the scikit-image photographs, split by whole photograph.

    Training patches overlap (corners every `train_stride` pixels);
    validation and test patches tile their photographs without overlap. No
    photograph is in two splits, so no held-out patch shares a pixel with a
    training patch.

    Args:
        patch_size: the side of the square patches (32).
        train_stride: the step between training patches.
        splits: the photographs of each split (`SAMPLE_IMAGE_SPLITS`).

    Returns:
        an `ImageData` of `uint8` `(n, patch_size, patch_size, 3)` patches,
        each split with the photograph of every patch in `sources`.
    """
    splits = dict(splits or SAMPLE_IMAGE_SPLITS)
    if set(splits) != {"train", "validation", "test"}:
        raise ValueError(
            "`splits` must name the photographs of 'train', 'validation' and "
            f"'test'. Received: {sorted(splits)}"
        )
    seen: dict[str, str] = {}
    for split, names in splits.items():
        for name in names:
            if name in seen:
                raise ValueError(
                    f"The photograph {name!r} is in both {seen[name]!r} and "
                    f"{split!r}: held-out patches would overlap training ones."
                )
            seen[name] = split
    photographs = load_sample_images(list(seen))
    result = {}
    for split, names in splits.items():
        stride = train_stride if split == "train" else patch_size
        parts, sources = [], []
        for name in names:
            patches = extract_patches(photographs[name], patch_size, stride)
            parts.append(patches)
            sources += [name] * len(patches)
        result[split] = ImageSplit(np.concatenate(parts), sources=sources)
    return ImageData(**result)


# ----------------------------------------------------------------- baselines
def lossless_bits_per_dim(images: Any, image_format: str = "PNG") -> float:
    """Bits per intensity of a lossless codec, each image its own file.

    Every image is written with Pillow (PNG at compression level 9 with
    `optimize=True`; WebP with `lossless=True` and the slowest, best
    method 6), and the bits of all files, headers included, are divided by
    the number of intensities: what storing the same images one file each
    costs, the measure the Image Transformer's bits per dimension compares
    with.

    Args:
        images: `uint8` `(n, height, width, channels)` (or one image).
        image_format: `"PNG"` or `"WEBP"`.

    Returns:
        the bits per dimension.

    Raises:
        ValueError: an unknown format, or WebP without WebP support in Pillow.
    """
    from PIL import Image, features

    images = np.asarray(images)
    if images.ndim == 3:
        images = images[None]
    images = check_image_batch("images", images)
    image_format = image_format.upper()
    if image_format == "PNG":
        options: dict[str, Any] = {"optimize": True, "compress_level": 9}
    elif image_format == "WEBP":
        if not features.check("webp"):
            raise ValueError(
                "This Pillow has no WebP support: image_format='WEBP' is not "
                "available. Use image_format='PNG'."
            )
        options = {"lossless": True, "quality": 100, "method": 6}
    else:
        raise ValueError(
            "`image_format` must be 'PNG' or 'WEBP'. Received: "
            f"image_format={image_format!r}"
        )

    def file_bytes(image: np.ndarray) -> int:
        buffer = io.BytesIO()
        picture = Image.fromarray(image[..., 0] if image.shape[-1] == 1 else image)
        picture.save(buffer, format=image_format, **options)
        return len(buffer.getvalue())

    # Pillow's encoders release the GIL: one thread per core (WebP method 6
    # takes about 50 ms a 32 x 32 patch).
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        total = sum(pool.map(file_bytes, images.astype(np.uint8)))
    return 8.0 * total / images.size
