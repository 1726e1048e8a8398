"""Training at scale: the paper's recipe (§5) as a resumable library function.

Example:
    ```python
    from keras_transformer import training

    config = training.TrainConfig.load("configs/dates_tiny.json")
    config = training.apply_overrides(config, ["train.train_steps=1000"])
    result = training.train(config, "runs/dates")
    print(result.evaluation.summary())
    ```

See `docs/training.md` for the command line (`keras-transformer train`),
distribution, mixed precision, TensorBoard, resuming and checkpoint
averaging.
"""

from keras_transformer.training.checkpoints import (
    average_checkpoints,
    checkpoint_paths,
    load_trained_model,
    weights_checksum,
)
from keras_transformer.training.classification import ClassificationRecipe
from keras_transformer.training.config import TrainConfig, config_differences
from keras_transformer.training.distribute import (
    configure_cpu_devices,
    is_chief,
    make_strategy,
)
from keras_transformer.training.evaluation import (
    EvaluationResult,
    Translation,
    evaluate_translations,
    translate,
)
from keras_transformer.training.fit_callbacks import (
    BleuEarlyStopping,
    CheckpointAveraging,
)
from keras_transformer.training.image import (
    ImageTrainer,
    image_batches,
    load_image_data,
)
from keras_transformer.training.image_recipe import ImageRecipe
from keras_transformer.training.kinds import register_recipe
from keras_transformer.training.loop import (
    ConfigMismatchError,
    TrainingDivergedError,
    TrainResult,
    train,
)
from keras_transformer.training.overrides import apply_overrides, parse_override
from keras_transformer.training.sections import DataConfig, TrainingConfig
from keras_transformer.training.trainer import (
    TokenStatistics,
    TranslationTrainer,
    accumulation_dataset,
)
from keras_transformer.training.translation_recipe import TranslationRecipe

# The kinds of run: one line each (see `keras_transformer.training.recipes`).
register_recipe(TranslationRecipe())
register_recipe(ClassificationRecipe())
register_recipe(ImageRecipe())

__all__ = [
    "BleuEarlyStopping",
    "CheckpointAveraging",
    "ConfigMismatchError",
    "DataConfig",
    "EvaluationResult",
    "ImageTrainer",
    "TokenStatistics",
    "TrainConfig",
    "TrainResult",
    "TrainingConfig",
    "TrainingDivergedError",
    "Translation",
    "TranslationTrainer",
    "accumulation_dataset",
    "apply_overrides",
    "average_checkpoints",
    "checkpoint_paths",
    "config_differences",
    "configure_cpu_devices",
    "evaluate_translations",
    "image_batches",
    "is_chief",
    "load_image_data",
    "load_trained_model",
    "make_strategy",
    "parse_override",
    "train",
    "translate",
    "weights_checksum",
]
