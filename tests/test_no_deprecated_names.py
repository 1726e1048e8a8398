"""Nothing is released, so nothing is deprecated: no page, notebook or
docstring teaches a removed name, and the package warns about none."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "keras_transformer"

#: The removed names (decoding, layers, models, translation), each a pattern
#: that the current API does not match (`decode_beam_step`, the current
#: `init_cache` of the blocks and stacks, `decoding.length_penalty(...)`).
REMOVED_NAMES = re.compile(
    r"\b(?:uncached_)?greedy_decode\b|\bsample_decode\b|\brun_greedy\b"
    r"|\brun_beam_search\b|\bcheck_length_penalty\b|\bdecoding\.check_integer\b"
    r"|\bdecoding\.beam_search\b|\bDecoder\.(?:greedy|beam_search|sample)\b"
    r"|\bgreedy_graph\b|\bbeam_search_graph\b|\buncached_greedy\b"
    r"|\bDeprecatedDecoderMethods\b|\bdecoding\.(?:deprecated|former)\b"
    r"|\bcall_cached\b|\bcall_beam_step\b|\bcached(?:_beam)?_self_attention\b"
    r"|\blayers\.validation\b"
    r"|\b(?:RestrictedMultiHeadAttention|LocalBlockAttention|LocalAttention2D)"
    r"\.init_cache\b"
    r"|\bdecode_step\b|\bIncrementalDecoder\b|\bTransformerLayers\b"
    r"|\bImageTransformerStack\.step\b|\bPADDING_ID\b|\bTestSetEvaluation\b"
    r"|\blength_penalty=|--length-penalty"
    r"|\b(?:Translator|EvaluationResult)\.length_penalty\b"
)

#: What a page or docstring says of a deprecated name.
DEPRECATION_WORDS = re.compile(r"deprecat|removed in 0\.4", re.IGNORECASE)


def _docs() -> dict[str, str]:
    return {
        path.relative_to(REPO).as_posix(): path.read_text(encoding="utf-8")
        for path in sorted((REPO / "docs").rglob("*.md"))
    }


def _notebook_cells() -> dict[str, str]:
    cells = {}
    for path in sorted((REPO / "examples").glob("*.ipynb")):
        notebook = json.loads(path.read_text(encoding="utf-8"))
        for index, cell in enumerate(notebook["cells"]):
            if cell["cell_type"] in ("code", "markdown"):
                where = f"{path.relative_to(REPO).as_posix()} cell {index}"
                cells[where] = "".join(cell["source"])
    return cells


def _docstrings() -> dict[str, str]:
    found = {}
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, kinds) and (text := ast.get_docstring(node)):
                name = getattr(node, "name", "<module>")
                found[f"{path.relative_to(REPO).as_posix()} {name}"] = text
    return found


def _mentions(texts: dict[str, str], pattern: re.Pattern[str]) -> list[str]:
    return [
        f"{where}: {match.group(0)!r}"
        for where, text in texts.items()
        for match in pattern.finditer(text)
    ]


def test_docs_notebooks_and_docstrings_use_no_removed_name() -> None:
    texts = {**_docs(), **_notebook_cells(), **_docstrings()}
    assert len(texts) > 200  # the pages, cells and docstrings were found
    assert not _mentions(texts, REMOVED_NAMES)


def test_docs_and_docstrings_announce_no_deprecation() -> None:
    assert not _mentions({**_docs(), **_docstrings()}, DEPRECATION_WORDS)


def test_the_package_warns_about_no_deprecated_name() -> None:
    offenders = [
        path.relative_to(REPO).as_posix()
        for path in sorted(PACKAGE.rglob("*.py"))
        if re.search(
            r"DeprecationWarning|warn_deprecated", path.read_text(encoding="utf-8")
        )
    ]
    assert not offenders
