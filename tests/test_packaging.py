"""The distribution: its name, its requirements, and a wheel that installs and runs.

The fast tests read `setup.py` (without installing anything) and hold its
requirements to the imports of the code: the core's modules import only what
`install_requires` names, the rest only what the `train` extra adds, and the
tests, notebooks, benchmarks and documentation scripts only what the `dev`
extra installs. The slow test builds the sdist and the wheel with
`python -m build`, checks them with `twine check`, installs the wheel into a
fresh virtual environment with only the core's requirements and JAX (no
TensorFlow), and runs `keras-transformer --help`, the README's usage example
and `tests/scripts/core_without_tensorflow.py` there.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "keras_transformer"
CORE = ("layers", "models", "losses", "metrics", "schedules", "optimizers")
CORE += ("conventions", "backend", "__init__")

#: Import name -> distribution, where they differ.
DISTRIBUTIONS = {
    "IPython": "ipykernel",  # the kernel's dependency: display()
    "PIL": "matplotlib",  # Pillow, matplotlib's dependency
    "google": "tensorflow",  # protobuf, pinned by TensorFlow
    "griffe": "griffelib",  # mkdocstrings-python's parser, read by docs/api_hook.py
    "keras_hub": "keras-hub",
    "sklearn": "scikit-learn",
    "skimage": "scikit-image",
    "tensorflow_text": "tensorflow-text",
    "yaml": "pyyaml",
}
#: Modules of this repository that the scripts import by path.
LOCAL = {
    "keras_transformer",
    "tests",
    "train_step",
    "conditions",
    "gpu_check",
    "serve",
    "multi30k_fast",
}


def _setup() -> dict:
    """`setup.py`'s arguments, read without building or installing."""
    from unittest import mock

    import setuptools

    with mock.patch.object(setuptools, "setup") as setup:
        namespace = {"__file__": str(REPO / "setup.py"), "__name__": "setup"}
        exec(compile((REPO / "setup.py").read_text(), "setup.py", "exec"), namespace)  # noqa: S102
    return setup.call_args.kwargs


def _name(requirement: str) -> str:
    """The normalised distribution name of a requirement string."""
    name = re.match(r"[A-Za-z0-9._-]+", requirement).group(0)
    return re.sub(r"[-_.]+", "-", name).lower()


def _names(requirements: list[str]) -> set[str]:
    return {_name(requirement) for requirement in requirements}


def _third_party_imports(paths: list[Path]) -> dict[str, set[str]]:
    """Distribution -> the files importing it (standard library left out)."""
    found: dict[str, set[str]] = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top in LOCAL:
                    continue
                distribution = _name(DISTRIBUTIONS.get(top, top))
                found.setdefault(distribution, set()).add(
                    path.relative_to(REPO).as_posix()
                )
    return found


def test_the_distribution_name_is_keras3_transformer() -> None:
    import keras_transformer
    from keras_transformer.conventions import DISTRIBUTION

    setup = _setup()
    assert setup["name"] == DISTRIBUTION == "keras3-transformer"
    assert setup["version"] == keras_transformer.__version__
    assert setup["entry_points"]["console_scripts"] == [
        "keras-transformer=keras_transformer.cli:main"
    ]
    assert setup["packages"][0] == "keras_transformer"


def test_install_requires_is_what_the_core_imports() -> None:
    setup = _setup()
    assert _names(setup["install_requires"]) == {"keras", "numpy"}
    core = [
        path
        for path in PACKAGE.rglob("*.py")
        if path.relative_to(PACKAGE).parts[0].removesuffix(".py") in CORE
    ]
    imported = _third_party_imports(core)
    # backend/tensorflow/ holds the optional TensorFlow twins.
    imported.pop("tensorflow", None)
    assert set(imported) == {"keras", "numpy"}, imported


def test_the_train_extra_covers_every_import_of_the_package() -> None:
    setup = _setup()
    extras = setup["extras_require"]
    declared = _names(setup["install_requires"] + extras["train"])
    # Optional modules import their extra's packages (kt.litert: litert,
    # kt.ctranslate2: ctranslate2, the sample photographs: image).
    for extra in ("litert", "ctranslate2", "image"):
        declared |= _names(extras[extra])
    imported = _third_party_imports(list(PACKAGE.rglob("*.py")))
    missing = {name: files for name, files in imported.items() if name not in declared}
    assert not missing, f"imported but not in install_requires or train: {missing}"
    unused = declared - set(imported)
    assert not unused, f"declared but never imported: {unused}"
    assert setup["extras_require"]["all"] == setup["extras_require"]["image"]


def test_the_train_extra_leaves_out_what_only_image_runs_need() -> None:
    """`make demo` installs `train`; scikit-image (and SciPy with it) comes
    with `image`, which `all`, `examples` and `dev` include."""
    extras = _setup()["extras_require"]
    assert "scikit-image" not in _names(extras["train"])
    assert _names(extras["image"]) == _names(extras["train"]) | {"scikit-image"}
    for extra in ("all", "examples", "dev"):
        assert "scikit-image" in _names(extras[extra]), extra


def test_the_dev_extra_covers_tests_notebooks_benchmarks_and_docs() -> None:
    setup = _setup()
    extras = setup["extras_require"]
    dev = _names(extras["dev"] + setup["install_requires"])
    paths = [
        *REPO.joinpath("tests").rglob("*.py"),
        *REPO.joinpath("examples").rglob("*.py"),
        *REPO.joinpath("benchmarks").rglob("*.py"),
        *REPO.joinpath("docs").rglob("*.py"),
    ]
    missing = {
        name: files
        for name, files in _third_party_imports(paths).items()
        if name not in dev
    }
    assert not missing, f"imported but not in the dev extra: {missing}"
    for extra in (
        "train",
        "image",
        "jax",
        "examples",
        "benchmark",
        "litert",
        "ctranslate2",
    ):
        assert _names(extras[extra]) <= dev, extra
    # What the Makefile, the docs build and the release need besides imports.
    assert {"mkdocs-jupyter", "mkdocstrings", "build", "twine", "ruff"} <= dev


def test_keras_hub_is_only_a_benchmark_requirement() -> None:
    extras = _setup()["extras_require"]
    holding = sorted(
        name for name, reqs in extras.items() if "keras-hub" in _names(reqs)
    )
    assert holding == ["benchmark", "dev"]
    assert "keras-hub" not in _names(_setup()["install_requires"])


def test_the_examples_extra_runs_jupyterlab_on_the_notebooks() -> None:
    examples = _names(_setup()["extras_require"]["examples"])
    assert {"jupyterlab", "ipykernel", "matplotlib", "tensorflow"} <= examples
    readme = (REPO / "examples" / "README.md").read_text(encoding="utf-8")
    assert 'pip install -e ".[examples]"' in readme
    assert "jupyter lab examples/" in readme


def test_the_readme_names_the_distribution_and_warns_about_the_other() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    install = readme.split("## Install", 1)[1].split("\n## ", 1)[0]
    assert "pip install keras3-transformer" in install
    assert "import keras_transformer" in install
    assert "keras-transformer" in install and "Keras 2" in install


# --------------------------------------------------------------- the wheel


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, (
        f"{' '.join(map(str, command))} failed:\n{result.stdout[-3000:]}"
        f"\n{result.stderr[-3000:]}"
    )
    return result


def _usage_example() -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    usage = readme.split("## Usage", 1)[1]
    return re.search(r"```python\n(.*?)```", usage, re.S).group(1)


@pytest.mark.slow
def test_the_wheel_installs_and_runs_on_the_core_alone(tmp_path: Path) -> None:
    """Build, check, install into a fresh venv without TensorFlow, run."""
    # A copy of the tree (setuptools writes its egg-info next to setup.py),
    # built as `python -m build` does: the sdist, then the wheel from it.
    source = tmp_path / "source"
    shutil.copytree(
        REPO,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv*", "runs", "site", "dist", "build", "*.egg-info",
            "__pycache__", ".*_cache",
        ),
    )  # fmt: skip
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "build", "--outdir", str(dist), str(source)])
    (wheel,) = dist.glob("keras3_transformer-*.whl")
    (sdist,) = dist.glob("keras3_transformer-*.tar.gz")
    _run([sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)])
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (metadata_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = archive.read(metadata_name).decode("utf-8")
    assert "Name: keras3-transformer" in metadata
    assert "keras_transformer/cli/__init__.py" in names
    assert not [n for n in names if n.startswith(("tests/", "examples/"))]
    required = [
        line.split(": ", 1)[1]
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    ]
    assert _names(required) == {"keras", "numpy"}

    # Nothing of this checkout may leak into the venv.
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")
    }
    env["KERAS_BACKEND"] = "jax"
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], env=env)
    python = venv / "bin" / "python"
    jax = _setup()["extras_require"]["jax"]
    _run(
        [str(python), "-m", "pip", "install", "--quiet", str(wheel), *jax],
        timeout=900,
        env=env,
    )
    installed = _run(
        [str(python), "-m", "pip", "list", "--format=freeze"], env=env
    ).stdout.lower()
    assert re.search(r"^keras3[-_]transformer==", installed, re.M), installed
    assert "tensorflow" not in installed
    # From a folder without the checkout, so that the installed copy is used.
    help_text = _run(
        [str(venv / "bin" / "keras-transformer"), "--help"], cwd=tmp_path, env=env
    ).stdout
    for command in ("train", "evaluate", "translate", "export"):
        assert command in help_text
    usage = _usage_example() + (
        "\nimport keras_transformer\n"
        "print(keras_transformer.__file__)\n"
        "print(model.output_shape, classifier.output_shape)\n"
    )
    shown = _run([str(python), "-c", usage], cwd=tmp_path, env=env).stdout
    assert str(venv) in shown and "(None, None, 8000) (None, 2)" in shown
    core = _run(
        [
            str(python),
            str(REPO / "tests/scripts/core_without_tensorflow.py"),
            "--installed",
        ],
        cwd=tmp_path,
        env=env,
        timeout=600,
    )
    assert "one fit step" in core.stdout and "installed package" in core.stdout
