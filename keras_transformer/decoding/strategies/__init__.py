"""The search strategies, found by name (`DecodeSettings.method`).

A strategy decides which tokens a search keeps; `search.run_search` runs any
of them over any step function. A new strategy is one new module here and
one entry in `STRATEGIES`: a factory taking the `SearchOptions` of a call,
which hold the settings and the call's own inputs (n-best lists, constraint
phrases). Beam search builds its n-best variant (`NBestBeamSearch`) or its
constrained one (`ConstrainedBeamSearch`, also greedy decoding's: a beam of
one) from those inputs; sampling refuses constraints.
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
    """The settings and per-call inputs a strategy reads, as the search's
    graph holds them.

    `beam_size`, `top_k` and `n_best` are Python values (they fix shapes);
    `alpha`, `temperature`, `seed` and `top_p` may be scalar tensors (one
    trace for every value); `phrases` is int32 `(batch, phrases,
    phrase_length)` or None (`constrained.pad_phrases`); `early_stop` is
    beam search's stopping rule (`DecodeSettings.early_stop`).
    """

    beam_size: int
    alpha: Any
    temperature: Any
    top_k: int | None
    seed: Any
    top_p: Any = None
    n_best: int | None = None
    phrases: Any = None
    early_stop: str = "exact"


StrategyFactory = Callable[[SearchOptions], Strategy]


def _beam(options: SearchOptions) -> Strategy:
    """Beam search; with the call's phrases constrained (Post and Vilar
    2018), with its `n_best` the n-best lists."""
    beam, alpha, stop = options.beam_size, options.alpha, options.early_stop
    if options.phrases is not None:
        return ConstrainedBeamSearch(beam, alpha, options.phrases, stop)
    if options.n_best is not None:
        return NBestBeamSearch(beam, alpha, options.n_best, stop)
    return BeamSearch(beam, alpha, stop)


def _greedy(options: SearchOptions) -> Strategy:
    """Greedy decoding; with the call's phrases a constrained beam of one."""
    if options.phrases is not None:
        return ConstrainedBeamSearch(
            1, options.alpha, options.phrases, options.early_stop
        )
    return GreedySearch()


def _sample(options: SearchOptions) -> Strategy:
    """Ancestral sampling (temperature, top-k, top-p)."""
    if options.phrases is not None:
        raise ValueError(
            "constraints need a search (method='beam' or 'greedy'), not "
            "sampling; drop the constraints or change the method."
        )
    return Sampling(options.seed, options.temperature, options.top_k, options.top_p)


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
