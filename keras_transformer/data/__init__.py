"""Text data for the Transformer: reading, named data sets, subwords, batching.

Example:
    ```python
    from keras_transformer import data

    train = data.load_multi30k("train", "de", "en")
    tokenizer = data.SubwordTokenizer.train(
        [*train.sources, *train.targets], vocabulary_size=8000
    )
    batches = data.make_translation_dataset(train, tokenizer)
    ```
"""

from keras_transformer.data.batching import (
    DEFAULT_BUCKET_BOUNDARIES,
    LengthReport,
    batch_for_eval,
    bucket_batch_sizes,
    count_too_long,
    make_translation_dataset,
)
from keras_transformer.data.datasets import (
    load_multi30k,
    load_tatoeba_spa_eng,
    multi30k_url,
    synthetic_dates,
    tatoeba_split_of,
)
from keras_transformer.data.imdb import load_imdb
from keras_transformer.data.tasks import TASKS, Task, TaskData, get_task
from keras_transformer.data.text import TextPairs, read_parallel_files, read_tsv_pairs
from keras_transformer.data.tokenizer import SubwordTokenizer

__all__ = [
    "DEFAULT_BUCKET_BOUNDARIES",
    "LengthReport",
    "SubwordTokenizer",
    "TASKS",
    "Task",
    "TaskData",
    "TextPairs",
    "batch_for_eval",
    "bucket_batch_sizes",
    "count_too_long",
    "get_task",
    "load_imdb",
    "load_multi30k",
    "load_tatoeba_spa_eng",
    "make_translation_dataset",
    "multi30k_url",
    "read_parallel_files",
    "read_tsv_pairs",
    "synthetic_dates",
    "tatoeba_split_of",
]
