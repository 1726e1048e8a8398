"""griffe extension: the package's docstring sections as mkdocstrings renders them.

The docstrings follow Keras' layout (Google style with a ``Call arguments:``
section, and an ``Example:`` whose ``>>>`` lines sit at the heading's
indentation so that they read well in ``help()`` and run under doctest).
griffe's Google parser knows neither: an unindented example became Markdown
text (the ``>>>`` prompts a nested blockquote) and ``Call arguments:`` an
admonition of run-on text. This extension rewrites the two before griffe
parses the docstring:

- ``Example:`` / ``Examples:`` followed by its block at the same indentation
  becomes an ``Examples:`` section with the block indented under it (griffe
  then renders each ``>>>`` run as highlighted code);
- ``Call arguments:`` becomes a parameters section titled "Call arguments",
  a list like ``Args:``.

A class whose docstring is another's (``__doc__ = _TransformerFields.__doc__``,
which griffe, reading the source, cannot evaluate) gets that class's
docstring, so that `TransformerConfig`'s page lists its fields.

The source files are not changed; only what the site shows is.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

#: A section heading line: ``Example:``, ``Call arguments:``, ``Returns:``, ...
_HEADING = re.compile(r"^(?P<indent>\s*)(?P<title>[A-Z][\w ]*):\s*$")
#: A line that ends an example: a heading, or a paragraph opened by a label
#: such as ``Reference: Vaswani et al. (2017)``.
_LABEL = re.compile(r"^(?P<indent>\s*)[A-Z][\w ]*:(\s|$)")
_EXAMPLE_TITLES = {"Example", "Examples"}
_CALL_ARGUMENTS = "Call arguments"
#: The Google section the call arguments are parsed as (rendered as a list).
_CALL_ARGUMENTS_AS = "Other Parameters"
#: The sections whose items are ``name: description`` (or ``a, b: ...``).
_ARGUMENT_TITLES = {"Args", "Arguments", _CALL_ARGUMENTS}
#: An item's first line: one or more names, then a colon.
_ITEM = re.compile(r"^[\w*][\w*, ]*:(\s|$)")
#: The first line of an item whose names go on on the next line: ``a, b,``.
_NAMES_GO_ON = re.compile(r"^[\w*]+(,\s*[\w*]+)*,$")


def _is_item(line: str) -> bool:
    return bool(_ITEM.match(line) or _NAMES_GO_ON.match(line))


def indent_examples(text: str) -> str:
    """Puts the block after ``Example:`` under the heading, as Google style wants.

    Args:
        text: a docstring.

    Returns:
        The docstring with each ``Example:`` / ``Examples:`` heading written
        ``Examples:`` and the lines after it, up to the next heading or
        label (``Reference: ...``) at its indentation or the end, indented
        by four spaces.

    """
    lines = text.split("\n")
    result: list[str] = []
    example_indent: str | None = None
    for line in lines:
        heading = _HEADING.match(line)
        label = _LABEL.match(line)
        if label and label.group("indent") == example_indent:
            example_indent = None
        if example_indent is not None:
            result.append(f"    {line}" if line.strip() else line)
            continue
        if heading and heading.group("title") in _EXAMPLE_TITLES:
            example_indent = heading.group("indent")
            result.append(f"{example_indent}Examples:")
            continue
        result.append(line)
    return "\n".join(result)


def _next_text(lines: list[str], index: int) -> str:
    return next((line.strip() for line in lines[index + 1 :] if line.strip()), "")


def tidy_argument_lists(text: str) -> str:
    """Writes ``Call arguments:`` as a Google section griffe parses as a list,
    and joins what griffe cannot split into ``name: description`` items.

    An item naming several arguments over several lines (``value_dim,
    output_dim, ...,`` then ``bias_initializer: as for ...``) becomes one
    line, and a line at the items' indentation that names no argument is
    the previous item's continuation. A ``Call arguments:`` block that is
    prose (``as for `RestrictedMultiHeadAttention` ...``) stays prose.

    """
    lines = text.split("\n")
    result: list[str] = []
    items_indent: str | None = None
    for index, line in enumerate(lines):
        heading = _HEADING.match(line)
        if heading:
            title, indent = heading.group("title"), heading.group("indent")
            listed = _is_item(_next_text(lines, index))
            items_indent = f"{indent}    " if title in _ARGUMENT_TITLES else None
            if title == _CALL_ARGUMENTS and listed:
                line = f"{indent}{_CALL_ARGUMENTS_AS}:"
            if not listed:
                items_indent = None
            result.append(line)
            continue
        if items_indent is not None and line.strip():
            indent = line[: len(line) - len(line.lstrip())]
            if len(indent) < len(items_indent):
                items_indent = None
            elif indent == items_indent:
                previous = result[-1].rstrip()
                if _NAMES_GO_ON.match(previous.strip()):
                    result[-1] = f"{previous} {line.strip()}"
                    continue
                if not _is_item(line.strip()):
                    result.append(f"    {line}")
                    continue
        result.append(line)
    return "\n".join(result)


def _borrowed_docstring(cls: griffe.Class) -> griffe.Docstring | None:
    """The docstring named by ``__doc__ = Base.__doc__`` in a class body."""
    assigned = cls.members.get("__doc__")
    value = str(getattr(assigned, "value", "") or "")
    if not value.endswith(".__doc__"):
        return None
    name = value.removesuffix(".__doc__")
    source = cls.module.members.get(name)
    if source is None or source.docstring is None:
        return None
    return griffe.Docstring(
        source.docstring.value,
        lineno=source.docstring.lineno,
        endlineno=source.docstring.endlineno,
        parent=cls,
        parser=source.docstring.parser,
        parser_options=source.docstring.parser_options,
    )


class DocstringSections(griffe.Extension):
    """Rewrites ``Example:`` and ``Call arguments:`` before griffe parses them."""

    def on_class(self, *, cls: griffe.Class, **kwargs: Any) -> None:
        if cls.docstring is None and (borrowed := _borrowed_docstring(cls)):
            cls.docstring = borrowed
            self.on_object(obj=cls)

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        docstring = obj.docstring
        if docstring is None or obj.is_alias:
            return
        docstring.value = tidy_argument_lists(indent_examples(docstring.value))
        if f"{_CALL_ARGUMENTS_AS}:" not in docstring.value:
            return
        for section in docstring.parsed:
            if section.kind is griffe.DocstringSectionKind.other_parameters:
                section.title = f"{_CALL_ARGUMENTS}:"
