"""`DecodeSettings`: the one owner of every decoding setting and its default.

"We used beam search with a beam size of 4 and length penalty alpha = 0.6
... We set the maximum output length during inference to input length + 50,
but terminate early when possible." (Vaswani et al. 2017, §6.1). The length
penalty is the one of Wu et al. (2016), Eq. 14:
`lp(Y) = ((5 + |Y|) / 6) ** alpha`.

The translator, the exported SavedModels, the command line and validation
during training all take a `DecodeSettings` (or read their defaults from
it): each default is written here and nowhere else, and each setting keeps
one name from the command line (``--alpha``) to its use.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from keras_transformer import validation
from keras_transformer.conventions import (
    DEFAULT_MAX_INPUT_LENGTH,
    EARLY_STOPS,
    EXTRA_LENGTH,
)


@dataclasses.dataclass(frozen=True)
class DecodeSettings:
    """How to decode: the search and its settings (§6.1).

    Attributes:
        method: a strategy of `strategies.STRATEGIES`: ``"beam"`` (beam
            search with the GNMT length penalty), ``"greedy"`` or
            ``"sample"`` (ancestral sampling). A beam of one hypothesis
            decodes greedily (`strategy`).
        beam_size: hypotheses kept per example (§6.1: 4).
        alpha: the length-penalty alpha (§6.1: 0.6); 0 ranks hypotheses by
            their raw log-probability.
        extra_length: an output may have its source's number of tokens plus
            this many (§6.1: "input length + 50"; `conventions.EXTRA_LENGTH`).
        max_input_length: longest source in subword ids, END included, where
            text is tokenized (translator, export); longer sources keep their
            first ``max_input_length - 1`` tokens.
        temperature: sampling draws from ``softmax(logits / temperature)``.
        top_k: sampling draws among the `top_k` most likely tokens only
            (None: all of them).
        top_p: sampling draws from the nucleus (Holtzman et al. 2020, §3.1):
            the fewest most likely tokens whose probability sums to at least
            `top_p`, renormalized (None or 1: all of them).
        n_best: how many hypotheses per source an n-best list holds (beam
            search: at most `beam_size`; `Decoder.decode(n_best=...)`).
        early_stop: when beam search stops an example (§6.1: "terminate
            early when possible"): ``"exact"``, once no live hypothesis can
            still beat its best finished one at any length it may reach
            (the bound of tensor2tensor's search: the same result as running
            to the limit); ``"heuristic"``, once none would beat it if it
            ended now (Hugging Face's ``early_stopping=False``): fewer steps,
            a result that may differ where a live hypothesis would have
            overtaken later.

    Raises:
        ValueError: (one line) on a setting out of range, naming it.

    Example:
    >>> DecodeSettings(beam_size=1).strategy
    'greedy'
    >>> DecodeSettings().describe()
    'beam 4, alpha 0.6'

    Reference: Vaswani et al. (2017), §6.1; Wu et al. (2016), Eq. 14.
    """

    method: str = "beam"
    beam_size: int = 4
    alpha: float = 0.6
    extra_length: int = EXTRA_LENGTH
    max_input_length: int = DEFAULT_MAX_INPUT_LENGTH
    temperature: float = 1.0
    top_k: int | None = None
    # n-best lists and nucleus sampling.
    top_p: float | None = None
    n_best: int = 1
    early_stop: str = "exact"

    def __post_init__(self) -> None:
        # Imported here: the command line reads these defaults (its flags)
        # before it loads TensorFlow, which the strategies import.
        from keras_transformer.decoding.strategies import STRATEGIES

        valid = validation
        valid.check_choice("method", self.method, tuple(STRATEGIES))
        valid.check_int("beam_size", self.beam_size, 1)
        valid.check_number("alpha", self.alpha, at_least=0.0)
        valid.check_int("extra_length", self.extra_length, 0)
        valid.check_int("max_input_length", self.max_input_length, 2)
        valid.check_number("temperature", self.temperature, above=0.0)
        valid.check_int("top_k", self.top_k, 1, allow_none=True)
        valid.check_choice("early_stop", self.early_stop, EARLY_STOPS)
        self._check_n_best_and_top_p()
        object.__setattr__(self, "alpha", float(self.alpha))
        object.__setattr__(self, "temperature", float(self.temperature))

    def _check_n_best_and_top_p(self) -> None:
        """`n_best` (at most `beam_size`, beam search only) and `top_p`."""
        validation.check_number("top_p", self.top_p, above=0.0, allow_none=True)
        if self.top_p is not None and self.top_p > 1.0:
            raise ValueError(
                f"top_p must be in (0, 1]. Received: top_p={self.top_p}; pass a "
                "probability such as 0.9, or None for no nucleus."
            )
        validation.check_int("n_best", self.n_best, 1)
        if self.n_best > 1 and self.strategy != "beam":
            greedy = " (which decodes greedily)" if self.method == "beam" else ""
            raise ValueError(
                f"n_best={self.n_best} needs beam search (method='beam', "
                f"beam_size >= n_best). Received: method={self.method!r}, "
                f"beam_size={self.beam_size}{greedy}."
            )
        if self.n_best > self.beam_size:
            raise ValueError(
                f"n_best={self.n_best} is larger than beam_size={self.beam_size}: "
                "a beam keeps only beam_size hypotheses. Pass n_best <= beam_size."
            )

    @property
    def strategy(self) -> str:
        """The registered strategy that runs: `method`, except that beam
        search with one hypothesis is greedy decoding (what the translator,
        exports and validation have always run for ``beam_size=1``)."""
        if self.method == "beam" and self.beam_size == 1:
            return "greedy"
        return self.method

    def describe(self) -> str:
        """``"greedy"``, ``"beam 4, alpha 0.6"`` or ``"sample, temperature 1"``."""
        if self.strategy == "beam":
            stop = "" if self.early_stop == "exact" else f", {self.early_stop} stop"
            return f"beam {self.beam_size}, alpha {self.alpha:g}{stop}"
        if self.strategy == "sample":
            top_k = "" if self.top_k is None else f", top {self.top_k}"
            top_p = "" if self.top_p is None else f", top-p {self.top_p:g}"
            return f"sample, temperature {self.temperature:g}{top_k}{top_p}"
        return "greedy"

    def replace(self, **changes: Any) -> DecodeSettings:
        """A copy with `changes` (validated again)."""
        return dataclasses.replace(self, **changes)


def default_setting(name: str) -> Any:
    """The default of the `DecodeSettings` field `name` (for the command
    line's flags, without building an instance)."""
    return DecodeSettings.__dataclass_fields__[name].default


def settings_with(
    settings: DecodeSettings | None, changes: dict[str, Any]
) -> DecodeSettings:
    """`settings` (the defaults when None) with the named `changes`."""
    fields = {field.name for field in dataclasses.fields(DecodeSettings)}
    unknown = sorted(set(changes) - fields)
    if unknown:
        raise TypeError(
            f"Unknown decoding setting(s) {', '.join(unknown)}; the settings are "
            f"{', '.join(sorted(fields))}."
        )
    return dataclasses.replace(settings or DecodeSettings(), **changes)


__all__ = [
    "default_setting",
    "DecodeSettings",
    "settings_with",
]
