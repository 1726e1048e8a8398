"""The search strategies, found by name (`DecodeSettings.method`).

A strategy decides which tokens a search keeps; `search.run_search` runs any
of them over any step function. A new strategy is one new module here and
one entry in `STRATEGIES`: a factory taking the `SearchOptions` of a call.
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
from keras_transformer.decoding.strategies.greedy import GreedySearch, Sampling


class SearchOptions(NamedTuple):
    """The settings a strategy reads, as the search's graph holds them.

    `beam_size` and `top_k` are Python values (they fix shapes); `alpha`,
    `temperature` and `seed` may be scalar tensors (one trace for every
    value).
    """

    beam_size: int
    alpha: Any
    temperature: Any
    top_k: int | None
    seed: Any
    top_p: Any = None


StrategyFactory = Callable[[SearchOptions], Strategy]

#: The registry: `DecodeSettings.method` -> factory.
STRATEGIES: dict[str, StrategyFactory] = {
    "greedy": lambda options: GreedySearch(),
    "beam": lambda options: BeamSearch(options.beam_size, options.alpha),
    "sample": lambda options: Sampling(
        options.seed, options.temperature, options.top_k, options.top_p
    ),
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
    "GreedySearch",
    "NBestBeamSearch",
    "Sampling",
    "SearchOptions",
    "StrategyFactory",
    "get_strategy",
    "length_penalty",
]
