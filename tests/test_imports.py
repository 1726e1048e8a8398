"""The package's import graph: imports point downwards only, and never loop.

Every module of `keras_transformer` is parsed (not imported) and every
``import`` it holds is collected, those inside functions included, and so
is every ``importlib.import_module("<constant name>")``. A call with a name
computed at run time (the lazy loading of the package root, of
`keras_transformer.decoding` and `keras_transformer.export`, and the export
format registry) cannot be followed: the
modules that make one are listed in `COMPUTED_IMPORTS`. Each
module belongs to a level (the table `LEVELS`, the one of
docs/architecture.md); a module may import its own level and those below,
never a higher one, and no chain of imports may come back to where it
started. The package root `keras_transformer/__init__.py` is left out: it
is a facade that imports each submodule on first attribute access.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "keras_transformer"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE

#: Level of each top-level module or subpackage, lowest first.
LEVELS: dict[str, int] = {
    # The core: keras and numpy only (and the optional TF fast kernels).
    **dict.fromkeys(
        (
            "conventions",
            "files",
            "backend",
            "layers",
            "models",
            "losses",
            "metrics",
            "schedules",
            "optimizers",
            "validation",
            "source_limits",
            "results_records",
            "cpu",
            "progress",
        ),
        0,
    ),
    "data": 1,
    "decoding": 1,
    "image_sampling": 1,
    "runs": 2,
    "translation": 3,
    **dict.fromkeys(("training", "export", "visualize"), 4),
    **dict.fromkeys(("cli", "__main__"), 5),
}


#: The modules whose ``importlib.import_module`` calls compute the name at
#: run time (not followed by the graph): the lazy loading of the package's
#: names and of the export formats (`keras_transformer.export.formats`).
COMPUTED_IMPORTS = {
    "keras_transformer",
    "keras_transformer.decoding",
    "keras_transformer.export",
    "keras_transformer.export.formats",
}

#: Subpackages that must not import one another (importer -> imported):
#: serving code is below training.
FORBIDDEN_IMPORTS = {("export", "training")}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module `name` refers to (a submodule, else its package), if ours."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name if name.startswith(PACKAGE) else None


def _import_module_call(node: ast.AST) -> ast.Call | None:
    """`node` if it is a call of ``importlib.import_module`` (or of an
    ``import_module`` imported by name)."""
    if not isinstance(node, ast.Call):
        return None
    function = node.func
    if isinstance(function, ast.Attribute) and function.attr == "import_module":
        return node
    if isinstance(function, ast.Name) and function.id == "import_module":
        return node
    return None


def _computed_import(node: ast.AST) -> bool:
    """Whether `node` calls ``import_module`` with a name computed at run time."""
    call = _import_module_call(node)
    if call is None or not call.args:
        return call is not None
    first = call.args[0]
    return not (isinstance(first, ast.Constant) and isinstance(first.value, str))


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that `module` imports, anywhere in its code
    (``import`` statements and ``import_module("<constant>")`` calls)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        call = _import_module_call(node)
        if call is not None and not _computed_import(call):
            names = [call.args[0].value]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from package import submodule` imports the submodule; `from
            # module import name` the module.
            names = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                for alias in node.names
            ]
        else:
            continue
        for name in names:
            target = _resolve(name, modules)
            if target is not None and target != module:
                found.add(target)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph = {
        name: _imports(name, path, modules)
        for name, path in modules.items()
        if name != PACKAGE
    }
    for targets in graph.values():
        targets.discard(PACKAGE)
    return graph


def _level(module: str) -> int:
    top = module.split(".")[1]
    assert top in LEVELS, (
        f"{module} has no level: add {top!r} to LEVELS in tests/test_imports.py "
        "(and to the table of docs/architecture.md)."
    )
    return LEVELS[top]


def test_every_module_has_a_level_and_imports_point_downwards() -> None:
    graph = _graph()
    assert len(graph) > 40  # the parser found the package
    upward = sorted(
        f"{module} (level {_level(module)}) imports {target} (level {_level(target)})"
        for module, targets in graph.items()
        for target in targets
        if _level(target) > _level(module)
    )
    assert not upward, "\n".join(upward)


def test_there_are_no_import_cycles() -> None:
    graph = _graph()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                cycles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert not cycles, "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_the_graph_sees_imports_inside_functions() -> None:
    graph = _graph()
    # `keras_transformer.cli.train` imports the training package only inside
    # its `run` function.
    assert "keras_transformer.training" in graph["keras_transformer.cli.train"]
    assert "keras_transformer.runs" in graph["keras_transformer.translation.loading"]


def test_the_graph_follows_import_module_with_a_constant_name(tmp_path) -> None:
    """``importlib.import_module("<constant>")``, inside a function too, is
    an import like any other (a lazy import cannot hide a cycle)."""
    source = tmp_path / "lazy.py"
    source.write_text(
        "import importlib\n\n\ndef load():\n"
        '    return importlib.import_module("keras_transformer.training.overrides")\n',
        encoding="utf-8",
    )
    found = _imports(f"{PACKAGE}.lazy", source, _modules())
    assert found == {"keras_transformer.training.overrides"}


def test_the_computed_lazy_imports_are_the_known_ones() -> None:
    """Every ``import_module`` call whose name is computed at run time (the
    graph cannot follow it) is in a module of `COMPUTED_IMPORTS`."""
    computed = {
        name
        for name, path in _modules().items()
        if any(
            _computed_import(node)
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        )
    }
    assert computed == COMPUTED_IMPORTS


def test_serving_code_imports_nothing_from_training() -> None:
    """`keras_transformer.export` (every format) reads runs through
    `keras_transformer.runs`, never through `keras_transformer.training`."""
    graph = _graph()
    assert graph["keras_transformer.export.saved_model"]  # the parser found it
    found = sorted(
        f"{module} imports {target}"
        for module, targets in graph.items()
        for target in targets
        if (module.split(".")[1], target.split(".")[1]) in FORBIDDEN_IMPORTS
    )
    assert not found, "\n".join(found)


def test_no_module_imports_another_modules_private_names() -> None:
    """A name one module shares with another is public (no leading
    underscore): 16 private names crossed module lines (`_short`,
    `_read_metadata`, `_download`, ...)."""
    found = sorted(
        f"{_module_name(path)} imports {node.module}.{alias.name}"
        for path in _modules().values()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE)
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    )
    assert not found, "\n".join(found)


#: The longest a module may be (issue 32: one job a module, held in one's head).
MAX_MODULE_LINES = 700


def test_no_module_is_longer_than_the_limit() -> None:
    lengths = {
        str(path.relative_to(ROOT)): len(path.read_text(encoding="utf-8").splitlines())
        for path in ROOT.rglob("*.py")
    }
    assert len(lengths) > 50  # the package was read
    assert {name: n for name, n in lengths.items() if n > MAX_MODULE_LINES} == {}
