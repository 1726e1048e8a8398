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


def indent_examples(text: str) -> str:
    """Puts the block after ``Example:`` under the heading, as Google style wants.

    Args:
        text: a docstring.

    Returns:
        The docstring with each ``Example:`` / ``Examples:`` heading written
        ``Examples:`` and the lines after it, up to the next heading or
        label (``Reference: ...``) at its indentation or the end, indented
        by four spaces.

    Example:
    >>> print(indent_examples("Sum.\\n\\nExample:\\n>>> 1 + 1\\n2"))
    Sum.
    <BLANKLINE>
    Examples:
        >>> 1 + 1
        2
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


def mark_call_arguments(text: str) -> str:
    """Writes ``Call arguments:`` as a Google section griffe parses as a list."""
    return re.sub(
        rf"^(\s*){_CALL_ARGUMENTS}:\s*$",
        rf"\1{_CALL_ARGUMENTS_AS}:",
        text,
        flags=re.M,
    )


class DocstringSections(griffe.Extension):
    """Rewrites ``Example:`` and ``Call arguments:`` before griffe parses them."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        docstring = obj.docstring
        if docstring is None or obj.is_alias:
            return
        has_call_arguments = f"{_CALL_ARGUMENTS}:" in docstring.value
        docstring.value = mark_call_arguments(indent_examples(docstring.value))
        if not has_call_arguments:
            return
        for section in docstring.parsed:
            if section.kind is griffe.DocstringSectionKind.other_parameters:
                section.title = f"{_CALL_ARGUMENTS}:"
