"""Trained runs as exports for serving: SavedModel, LiteRT and CTranslate2.

* `keras_transformer.export.saved_model`: the SavedModel of each kind of run
  (`export_translator`, `export_classifier`, `export_image_completer`,
  `export_run`); its translation graph is `keras_transformer.export.signatures`;
* `keras_transformer.export.classification`: raw reviews classified with
  a classification run or its export (`ReviewClassifier`), by the same
  function as the SavedModel's ``classify`` signature;
* `keras_transformer.export.litert`: greedy decoding on-device
  (`export_litert`, `LiteRTTranslator`);
* `keras_transformer.export.ctranslate2`: a CTranslate2 model folder
  (`export_ctranslate2`, `CTranslate2Translator`; the weights copied by
  `keras_transformer.export.ctranslate2_spec`); which int8 kernels this CPU
  runs exactly is `keras_transformer.cpu`'s (`cpu_info`);
* `keras_transformer.export.settings`: the one resolver of the decoding
  settings an export bakes in (`resolve_settings`, `ExportSettings`);
* `keras_transformer.export.target`: the one writer of every format (the
  check of the folder, the lock, the swap) and `ExportFormat`;
* `keras_transformer.export.formats`: the registry of the formats
  (`FORMATS`, `get_format`, `serving_format`) and `TranslatorLike`.

This package lists their public names and imports each module on first use,
so that ``from keras_transformer.export.ctranslate2 import
CTranslate2Translator`` imports neither TensorFlow nor Keras.

Example:
>>> from keras_transformer import export
>>> export.get_format("litert").quantizations
('int8', 'float32')
"""

from __future__ import annotations

import importlib
from typing import Any

#: Each module -> the public names it defines that this package lists.
_MODULE_NAMES = {
    "saved_model": "CLASSIFY_SIGNATURE COMPLETE_SIGNATURE INFO_FILE MODEL_FILE "
    "RUN_EXPORTS default_given_rows export_classifier export_image_completer "
    "export_run export_translator save_model_and_tokenizer",
    "signatures": "BATCH_SHAPE_MESSAGE COMPILED_BATCH_SIZES COMPILED_SOURCE_WIDTHS "
    "IDS_SIGNATURE INPUT_NAME TRANSLATE_SIGNATURE check_sentence_batch "
    "checked_shape export_n_best phrases_met source_ids_from_strings",
    "classification": "ReviewClassifier classify_function load_classifier",
    "settings": "ExportSettings resolve_settings",
    "target": "TEST_SET_FILE ExportFormat check_export_target lock_path writing_export",
    "formats": "FORMATS TranslatorLike export_run_as get_format read_test_set "
    "serving_format test_set_record",
    "ctranslate2": "CTranslate2Translator export_ctranslate2",
    "litert": "LiteRTTranslator export_litert",
}
#: Each public name -> the module that defines it (the run folder readers
#: are `keras_transformer.runs`').
_NAMES = {
    **{
        name: f"{__name__}.{module}"
        for module, names in _MODULE_NAMES.items()
        for name in names.split()
    },
    **dict.fromkeys(
        ("is_export_dir", "load_export", "run_kind"), "keras_transformer.runs"
    ),
    "quantized": "keras_transformer.runs.exports",
}


def __getattr__(name: str) -> Any:
    if name in (*_MODULE_NAMES, "ctranslate2_spec"):
        return importlib.import_module(f"{__name__}.{name}")
    if name in _NAMES:
        value = getattr(importlib.import_module(_NAMES[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = sorted(_NAMES)
