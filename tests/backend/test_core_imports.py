"""The core (layers, models, losses, metrics, schedules, optimizers and the
portable backend) stands alone: it imports neither TensorFlow nor the other
packages of the `train` extra, and only `keras_transformer.backend` asks
which Keras backend runs."""

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "keras_transformer"
REPOSITORY = PACKAGE.parent
CORE = [
    *sorted((PACKAGE / "layers").rglob("*.py")),
    *sorted((PACKAGE / "models").rglob("*.py")),
    PACKAGE / "losses.py",
    PACKAGE / "metrics.py",
    PACKAGE / "schedules.py",
    PACKAGE / "optimizers.py",
    PACKAGE / "conventions.py",
    PACKAGE / "backend" / "__init__.py",
    PACKAGE / "backend" / "portable.py",
]
# Only the backend's dispatch module may ask for the Keras backend.
DISPATCH = PACKAGE / "backend" / "__init__.py"
FORBIDDEN = {"tensorflow", "tensorflow_text", "matplotlib", "sacrebleu"}


def _imported_modules(tree, module_level_only):
    """Top-level names of the modules imported in `tree`; at module level
    (including `if` / `try` blocks, excluding function bodies) or anywhere."""
    found = []

    def visit(node, in_function):
        if isinstance(node, ast.Import):
            found.extend((a.name, node.lineno, in_function) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, node.lineno, in_function))
        for child in ast.iter_child_nodes(node):
            visit(
                child,
                in_function
                or isinstance(
                    node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
                ),
            )

    visit(tree, False)
    return [
        (name.split(".")[0], line)
        for name, line, in_function in found
        if not (module_level_only and in_function)
    ]


def test_the_core_modules_exist():
    names = {path.relative_to(PACKAGE).as_posix() for path in CORE}
    assert {"layers/attention.py", "models/transformer.py", "losses.py"} <= names
    assert all(path.is_file() for path in CORE)


@pytest.mark.parametrize(
    "path", CORE, ids=lambda path: path.relative_to(PACKAGE).as_posix()
)
def test_no_core_module_imports_tensorflow_or_the_train_extra(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    # Not at module level, and not even inside a function: the TensorFlow
    # code of the core lives in keras_transformer/backend/tensorflow/.
    offending = [
        (name, line)
        for name, line in _imported_modules(tree, module_level_only=False)
        if name in FORBIDDEN
    ]
    assert not offending, f"{path.name} imports {offending}"


@pytest.mark.parametrize(
    "path",
    [path for path in CORE if path != DISPATCH],
    ids=lambda path: path.relative_to(PACKAGE).as_posix(),
)
def test_no_core_module_asks_for_the_keras_backend(path):
    source = path.read_text()
    tree = ast.parse(source, filename=str(path))
    calls = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "backend"
        and isinstance(node.func.value, ast.Attribute)
        and node.func.value.attr == "backend"
    ]
    assert not calls, (
        f"{path.name} calls keras.backend.backend() on lines {calls}: "
        "dispatch through keras_transformer.backend instead"
    )


def test_tensorflow_is_imported_only_by_the_tensorflow_twins():
    twins = sorted((PACKAGE / "backend" / "tensorflow").glob("*.py"))
    assert {path.name for path in twins} >= {"nn.py", "losses.py", "optimizers.py"}
    init = ast.parse((PACKAGE / "backend" / "tensorflow" / "__init__.py").read_text())
    assert not _imported_modules(init, module_level_only=False)


@pytest.mark.skipif(
    importlib.util.find_spec("jax") is None, reason="needs jax (pip install jax[cpu])"
)
def test_the_core_trains_on_jax_with_tensorflow_blocked():
    script = REPOSITORY / "tests" / "scripts" / "core_without_tensorflow.py"
    environment = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=REPOSITORY,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "on jax: tiny preset" in result.stdout
    assert "loss " in result.stdout
