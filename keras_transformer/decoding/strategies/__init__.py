"""The search strategies, found by name (`DecodeSettings.method`).

A strategy decides which tokens a search keeps; `search.run_search` runs any
of them over any step function. A new strategy is one new module here and
one entry in `STRATEGIES`: a factory taking the `SearchOptions` of a call,
which hold its `DecodeSettings` and its own inputs (n-best lists, constraint
phrases); a new setting is a `DecodeSettings` field its strategy reads.
Beam search builds its n-best variant (`NBestBeamSearch`) or its constrained
one (`ConstrainedBeamSearch`, also greedy decoding's: a beam of one) from
those inputs; sampling refuses constraints.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from keras_transformer.decoding.search import Strategy
from keras_transformer.decoding.strategies.beam import (
    BeamSearch,
    NBestBeamSearch,
    length_penalty,
)
from keras_transformer.decoding.strategies.constrained import ConstrainedBeamSearch
from keras_transformer.decoding.strategies.greedy import GreedySearch, Sampling


class SearchOptions(NamedTuple):
    """What a strategy is built from: the call's settings and its own
    inputs, as the search's graph holds them.

    `settings` is the call's `DecodeSettings` (not imported here: the
    settings import this registry): a strategy reads every setting from it
    (beam size, top-k, top-p, the stopping rule, and any setting added
    later), except `alpha` and `temperature`, which it reads from these
    fields (scalar tensors in a search: one trace for every value). `seed`
    is an int32 scalar (sampling); `n_best` asks beam search for n-best
    lists; `phrases` is int32 `(batch, phrases, phrase_length)` or None
    (`constrained.pad_phrases`).
    """

    settings: Any
    alpha: Any
    temperature: Any
    seed: Any = 0
    n_best: int | None = None
    phrases: Any = None


StrategyFactory = Callable[[SearchOptions], Strategy]


def _beam(options: SearchOptions) -> Strategy:
    """Beam search; with the call's phrases constrained (Post and Vilar
    2018), with its `n_best` the n-best lists."""
    settings, alpha = options.settings, options.alpha
    beam, stop = settings.beam_size, settings.early_stop
    if options.phrases is not None:
        return ConstrainedBeamSearch(beam, alpha, options.phrases, stop)
    if options.n_best is not None:
        return NBestBeamSearch(beam, alpha, options.n_best, stop)
    return BeamSearch(beam, alpha, stop)


def _greedy(options: SearchOptions) -> Strategy:
    """Greedy decoding; with the call's phrases a constrained beam of one."""
    if options.phrases is not None:
        return ConstrainedBeamSearch(
            1, options.alpha, options.phrases, options.settings.early_stop
        )
    return GreedySearch()


def _sample(options: SearchOptions) -> Strategy:
    """Ancestral sampling (temperature, top-k, top-p)."""
    if options.phrases is not None:
        raise ValueError(
            "constraints need a search (method='beam' or 'greedy'), not "
            "sampling; drop the constraints or change the method."
        )
    settings = options.settings
    return Sampling(options.seed, options.temperature, settings.top_k, settings.top_p)


#: The registry: `DecodeSettings.method` -> factory.
STRATEGIES: dict[str, StrategyFactory] = {
    "greedy": _greedy,
    "beam": _beam,
    "sample": _sample,
}


def get_strategy(name: str, options: SearchOptions) -> Strategy:
    """The strategy registered under `name`, built for `options`."""
    if name not in STRATEGIES:
        raise ValueError(
            f"Unknown decoding method {name!r}; choose one of "
            f"{', '.join(sorted(STRATEGIES))} or register it in STRATEGIES."
        )
    return STRATEGIES[name](options)


__all__ = [
    "STRATEGIES",
    "BeamSearch",
    "ConstrainedBeamSearch",
    "GreedySearch",
    "NBestBeamSearch",
    "Sampling",
    "SearchOptions",
    "StrategyFactory",
    "get_strategy",
    "length_penalty",
]
