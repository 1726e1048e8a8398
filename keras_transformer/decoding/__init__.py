"""Inference: greedy decoding, beam search (§6.1) and sampling.

"We used beam search with a beam size of 4 and length penalty alpha = 0.6
... We set the maximum output length during inference to input length + 50,
but terminate early when possible." (Vaswani et al. 2017, §6.1). The length
penalty is the one of Wu et al. (2016), Eq. 14:
`lp(Y) = ((5 + |Y|) / 6) ** alpha`, and a finished hypothesis is ranked by
`log P(Y | X) / lp(Y)`.

One public tier: ``Decoder(model).decode(source_ids, settings)`` returns a
`DecodeResult`; `DecodeSettings` holds the search and its settings, each
default declared there once. The package:

- `settings`: `DecodeSettings`;
- `search`: the one search loop (`run_search`, a `tf.while_loop`);
- `strategies`: greedy, beam search (with a call's `n_best` its n-best
  lists, `NBestBeamSearch`; with its phrases `ConstrainedBeamSearch`),
  sampling (temperature, top-k, top-p), found by name in
  `strategies.STRATEGIES` (a new strategy: one module and one entry);
- `steps`: the model's cached step (`TransformerStack.decode_beam_step`,
  beam 1 for greedy decoding and sampling) and the uncached reference;
- `decoder`: `Decoder`, which puts them together and compiles them.

Token ids: 0 is padding and is never generated; by default 2 starts and 3 ends
a sequence. Outputs hold the generated tokens (END included, the start token
excluded) followed by zeros.

Example:
>>> import numpy as np, keras_transformer as kt
>>> from keras_transformer.decoding import Decoder, DecodeSettings
>>> model = kt.models.build_transformer(kt.models.presets["tiny"])
>>> result = Decoder(model).decode(np.array([[5, 6, 7, 3]]), DecodeSettings())
>>> result.token_ids.shape[0], result.scores.shape
(1, (1,))
"""

import importlib
from typing import TYPE_CHECKING, Any

# Each public name and its module, imported on first use: the command line
# reads `DecodeSettings`' defaults without loading TensorFlow.
_NAMES = {
    "DecodeSettings": "settings",
    "default_setting": "settings",
    "DecodeResult": "result",
    "NBestResult": "result",
    "ScoreResult": "result",
    "NBestBeamSearch": "strategies",
    "Decoder": "decoder",
    "StepFunction": "search",
    "run_search": "search",
    "STRATEGIES": "strategies",
    "BeamSearch": "strategies",
    "GreedySearch": "strategies",
    "Sampling": "strategies",
    "get_strategy": "strategies",
    "length_penalty": "strategies",
    "get_decoder": "decoder",
    # Constraints and ensembles (Post and Vilar 2018; log-linear averaging).
    "ConstrainedBeamSearch": "strategies.constrained",
    "unmet_phrases": "strategies.constrained",
    "EnsembleDecoder": "ensemble",
}


if TYPE_CHECKING:  # the same names, for readers and documentation tools
    from keras_transformer.decoding.decoder import Decoder, get_decoder
    from keras_transformer.decoding.ensemble import EnsembleDecoder
    from keras_transformer.decoding.result import (
        DecodeResult,
        NBestResult,
        ScoreResult,
    )
    from keras_transformer.decoding.search import StepFunction, run_search
    from keras_transformer.decoding.settings import DecodeSettings, default_setting
    from keras_transformer.decoding.strategies import (
        STRATEGIES,
        BeamSearch,
        GreedySearch,
        NBestBeamSearch,
        Sampling,
        get_strategy,
        length_penalty,
    )
    from keras_transformer.decoding.strategies.constrained import (
        ConstrainedBeamSearch,
        unmet_phrases,
    )


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        module = importlib.import_module(f"keras_transformer.decoding.{_NAMES[name]}")
        return getattr(module, name)
    raise AttributeError(
        f"module 'keras_transformer.decoding' has no attribute {name!r}"
    )


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "BeamSearch",
    "ConstrainedBeamSearch",
    "DecodeResult",
    "DecodeSettings",
    "Decoder",
    "EnsembleDecoder",
    "GreedySearch",
    "NBestBeamSearch",
    "NBestResult",
    "STRATEGIES",
    "Sampling",
    "ScoreResult",
    "StepFunction",
    "default_setting",
    "get_decoder",
    "get_strategy",
    "length_penalty",
    "run_search",
    "unmet_phrases",
]
