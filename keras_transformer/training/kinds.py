"""The registry of the kinds of run: a kind's name -> its `Recipe`.

A run config names its kind in a top-level ``"kind"`` key (a stored config
without one is a translation run). Everything a kind does differently is
its recipe (`keras_transformer.training.recipes.Recipe`), defined in the
kind's own module (`translation_recipe`, `classification`, `image_recipe`)
and registered here once, by `keras_transformer.training` (its
``__init__``: one line per kind). This module imports no kind, so that
`training.config` can find a kind's settings section through it.
"""

from __future__ import annotations

from typing import Any

from keras_transformer.runs import STORED_KINDS

__all__ = ["DEFAULT_KIND", "known_kinds", "recipe_for", "register_recipe"]

DEFAULT_KIND = "translation"
#: kind -> its recipe (`register_recipe`).
_RECIPES: dict[str, Any] = {}


def register_recipe(recipe: Any) -> None:
    """Registers (or replaces) `recipe` as the recipe of ``recipe.kind``
    (and its `Recipe.stored_kind`, if any, as how its runs are read)."""
    _RECIPES[recipe.kind] = recipe
    if recipe.stored_kind is not None:
        STORED_KINDS[recipe.kind] = recipe.stored_kind


def known_kinds() -> tuple[str, ...]:
    """The names of the registered kinds, sorted."""
    return tuple(sorted(_RECIPES))


def recipe_for(config_or_kind: Any) -> Any:
    """The `Recipe` of a `TrainConfig` (its ``kind``) or of a kind's name.

    Raises:
        ValueError: one line listing the known kinds, for an unknown one.
    """
    kind = getattr(config_or_kind, "kind", config_or_kind)
    recipe = _RECIPES.get(kind) if isinstance(kind, str) else None
    if recipe is None:
        raise ValueError(
            f"`kind` must be one of {', '.join(known_kinds())}. Received: {kind!r}"
        )
    return recipe
