"""The documentation site builds without warnings and documents the public API.

`mkdocs build --strict` fails on any warning: a broken link between pages, a
nav entry without a file, an API object that mkdocstrings cannot find. The
API pages must then name the classes and functions the package exports
(one generated page per public layer, model, loss, metric, schedule,
callback and command: docs/api_hook.py), show docstring examples as code
and ``Call arguments:`` as a list, the example notebooks must be pages with
their pictures, no docstring may show a reStructuredText literal marker
(``Example::``), and no internal link of the built site may be broken.
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"


def _hook_pages() -> list[str]:
    """The pages docs/notebooks_hook.py adds (the notebooks and their index)."""
    spec = importlib.util.spec_from_file_location(
        "notebooks_hook", DOCS / "notebooks_hook.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.pages()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", output],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return output


def _anchors(site: Path, page: str) -> set[str]:
    """The objects documented on a page and the pages under it (a group of
    the API reference: its index and one page per name): `module.name` for
    each heading."""
    found = set()
    for html_file in sorted((site / page).rglob("index.html")):
        html = html_file.read_text(encoding="utf-8")
        for anchor in re.findall(r'id="(keras_transformer\.[^"]+)"', html):
            module, _, name = anchor.rpartition(".")
            if module in MODULES:
                found.add(name)
    return found


MODULES = {
    "keras_transformer.layers",
    "keras_transformer.models",
    "keras_transformer.models.classifier",
    "keras_transformer.training.callbacks",
    "keras_transformer.training.epoch_end",
    "keras_transformer.training.preemption",
    "keras_transformer.schedules",
    "keras_transformer.optimizers",
    "keras_transformer.losses",
    "keras_transformer.metrics",
    "keras_transformer.data",
    "keras_transformer.data.imdb",
    "keras_transformer.training",
    "keras_transformer.decoding",
    "keras_transformer.visualize",
    "keras_transformer.export",
    "keras_transformer.export.saved_model",
    "keras_transformer.export.ctranslate2",
    "keras_transformer.export.litert",
    "keras_transformer.runs.exports",
    "keras_transformer.translation",
    "keras_transformer.data.images",
    "keras_transformer.image_sampling",
}


@pytest.mark.parametrize(
    ("page", "names"),
    [
        (
            "api/layers",
            [
                "MultiHeadAttention",
                "scaled_dot_product_attention",
                "SinusoidalPositionEncoding",
                "PositionEmbedding",
                "ScaledEmbedding",
                "FeedForward",
                "EncoderBlock",
                "DecoderBlock",
                "RestrictedMultiHeadAttention",
                "LocalBlockAttention",
                "causal_mask",
                "padding_mask",
                "merge_attention_masks",
                "LayerNormalization",
                "Dropout",
            ],
        ),
        (
            "api/models",
            [
                "TransformerConfig",
                "build_transformer",
                "encoder_model",
                "decoder_model",
                "ImageTransformerConfig",
                "build_image_transformer",
                "ImageTransformerStack",
                "image_bits_per_dim",
            ],
        ),
        ("api/schedules", ["NoamSchedule", "paper_adam", "Adam"]),
        ("api/losses", ["MaskedSparseCrossEntropy", "label_smoothed_nll"]),
        ("api/metrics", ["MaskedAccuracy", "Perplexity"]),
        ("api/models", ["build_classifier"]),
        (
            "api/callbacks",
            ["CheckpointCallback", "NaNGuard", "PreemptionCheckpoint"],
        ),
        (
            "api/data",
            [
                "SubwordTokenizer",
                "TextPairs",
                "load_multi30k",
                "synthetic_dates",
                "make_translation_dataset",
                "load_imdb",
                "load_cifar10",
                "load_sample_patches",
                "lossless_bits_per_dim",
            ],
        ),
        (
            "api/training",
            [
                "TrainConfig",
                "DataConfig",
                "train",
                "make_strategy",
                "TranslationTrainer",
                "ImageTrainer",
            ],
        ),
        (
            "api/decoding",
            [
                "Decoder",
                "DecodeResult",
                "ImageSampler",
                "complete_images",
                "sample_images",
            ],
        ),
        ("api/visualize", ["attention_maps", "plot_attention", "plot_heads"]),
        (
            "api/export",
            ["export_translator", "load_export", "translate_lines", "evaluate"],
        ),
    ],
)
def test_api_pages_document_the_public_names(
    site: Path, page: str, names: list[str]
) -> None:
    missing = sorted(set(names) - _anchors(site, page))
    assert not missing, f"{page} does not document {missing}"


def test_every_exported_layer_is_documented(site: Path) -> None:
    import keras_transformer.layers as layers

    missing = sorted(set(layers.__all__) - _anchors(site, "api/layers"))
    assert not missing


def test_every_page_is_in_the_nav() -> None:
    class _Loader(yaml.SafeLoader):
        """Reads mkdocs.yml, ignoring the `!!python/name:` tags some use."""

    _Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda *_: None)
    config = yaml.load((REPO / "mkdocs.yml").read_text(encoding="utf-8"), _Loader)

    def pages(node: object) -> list[str]:
        if isinstance(node, str):
            return [node] if node.endswith((".md", ".ipynb")) else []
        if isinstance(node, dict):
            return [p for value in node.values() for p in pages(value)]
        if isinstance(node, list):
            return [p for value in node for p in pages(value)]
        return []

    in_nav = set(pages(config["nav"]))
    on_disk = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    on_disk |= set(_hook_pages())
    assert not on_disk - in_nav, (
        f"add these pages to the nav of mkdocs.yml: {sorted(on_disk - in_nav)}"
    )
    assert not in_nav - on_disk, (
        f"nav entries without a file: {sorted(in_nav - on_disk)}"
    )


def test_site_pages(site: Path) -> None:
    index = (site / "index.html").read_text(encoding="utf-8")
    assert "Attention Is All You Need" in index
    paper_map = (site / "paper-to-code" / "index.html").read_text(encoding="utf-8")
    for name in ("scaled_dot_product_attention", "NoamSchedule", "BeamSearch"):
        assert name in paper_map


def test_notebook_pages_show_their_outputs(site: Path) -> None:
    """Each notebook is a page; an executed one shows its figures."""
    for src_uri in _hook_pages():
        if not src_uri.endswith(".ipynb"):
            continue
        notebook = json.loads((REPO / src_uri).read_text(encoding="utf-8"))
        figures = sum(
            "image/png" in output.get("data", {})
            for cell in notebook["cells"]
            for output in cell.get("outputs", [])
        )
        html = (site / src_uri.removesuffix(".ipynb") / "index.html").read_text(
            encoding="utf-8"
        )
        assert html.count("data:image/png;base64,") >= figures, src_uri
        first_code = next(c for c in notebook["cells"] if c["cell_type"] == "code")
        assert "import" in "".join(first_code["source"])
        assert "import</span>" in html or "import " in html


def test_no_page_shows_a_literal_block_marker(site: Path) -> None:
    """Docstrings use Markdown code blocks, not reStructuredText's `::`."""
    for page in site.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        shown = re.findall(r"<p>[^<]*::</p>", html)
        assert not shown, f"{page.relative_to(site)}: {shown}"


def test_pictures_are_shown_where_they_explain() -> None:
    """The pictures in docs/images/ are each used by a page."""
    pages = "\n".join(p.read_text(encoding="utf-8") for p in DOCS.rglob("*.md"))
    for image in sorted((DOCS / "images").iterdir()):
        if image.suffix in (".png", ".svg"):
            assert f"images/{image.name}" in pages, f"no page shows {image.name}"


def test_the_architecture_picture_is_the_import_table() -> None:
    """docs/images/architecture.svg: up to date, and the floors of test_imports."""
    script = DOCS / "diagrams" / "architecture.py"
    check = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    spec = importlib.util.spec_from_file_location("architecture", script)
    diagram = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(diagram)
    from tests.test_imports import LEVELS

    drawn = {
        module: floor for floor, modules, *_ in diagram.FLOORS for module in modules
    }
    assert drawn == LEVELS


def _api_hook():
    """docs/api_hook.py, imported (registered, as its dataclass needs)."""
    spec = importlib.util.spec_from_file_location("api_hook", DOCS / "api_hook.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _public_callables(module: object) -> set[str]:
    """The classes and functions a module exports (``__all__``, or the
    public ones it defines)."""
    import inspect

    names = getattr(module, "__all__", None)
    if names is None:
        names = [
            name
            for name, value in vars(module).items()
            if not name.startswith("_")
            and getattr(value, "__module__", None) == module.__name__
        ]
    # A second name bound to a class or function is no page of its own: the
    # page of its own name documents it.
    return {
        name
        for name in names
        if (
            inspect.isclass(getattr(module, name))
            or inspect.isfunction(getattr(module, name))
        )
        and getattr(module, name).__name__ == name
    }


def test_every_public_name_has_its_api_page() -> None:
    """The generated pages are exactly the public classes and functions of
    the grouped modules (imported here, not read like the hook does), and
    every command has a page."""
    import importlib

    from keras_transformer.cli import COMMANDS

    hook = _api_hook()
    pages = hook.api_pages()
    for group in hook.GROUPS:
        expected = {
            f"api/{group.slug}/{name}.md"
            for dotted in group.modules
            for name in _public_callables(importlib.import_module(dotted))
        }
        generated = {page for page, _, _ in pages[group.slug]}
        assert generated == expected, (group.slug, generated ^ expected)
    assert {page for page, _, _ in pages["commands"]} == {
        f"api/commands/{name}.md" for name in COMMANDS
    }
    assert {"MultiHeadAttention", "NoamSchedule", "NaNGuard"} <= {
        Path(page).stem for entries in pages.values() for page, _, _ in entries
    }


def _prose(html: str) -> str:
    """A page without its code: <pre> blocks and <code> spans removed."""
    html = re.sub(r"<pre\b.*?</pre>", "", html, flags=re.S)
    return re.sub(r"<code\b.*?</code>", "", html, flags=re.S)


def test_api_examples_are_code_and_call_arguments_a_list(site: Path) -> None:
    """Docstring examples render as highlighted ``>>>`` code, never as
    nested blockquotes, and ``Call arguments:`` as a list of arguments."""
    page = site / "api" / "layers" / "MultiHeadAttention" / "index.html"
    html = page.read_text(encoding="utf-8")
    # Coloured by Pygments as a console session: the prompt, then the code.
    assert (
        '<span class="gp">&gt;&gt;&gt; </span><span class="kn">import</span>'
        '<span class="w"> </span><span class="nn">numpy</span>'
    ) in html
    # The section's title cell (readthedocs theme) and the list after it.
    call_arguments = html.split('class="field-name">Call arguments:</th>', 1)
    assert len(call_arguments) == 2, "no Call arguments section"
    listed = call_arguments[1].split("</ul>", 1)[0]
    for argument in ("query", "attention_mask", "cache_update_index"):
        assert f"<b><code>{argument}</code></b>" in listed, argument
    for html_file in sorted((site / "api").rglob("*.html")):
        html = html_file.read_text(encoding="utf-8")
        prose = _prose(html)
        where = html_file.relative_to(site)
        assert "&gt;&gt;&gt;" not in prose, f"{where}: a >>> outside code"
        assert "<blockquote>\n<blockquote>" not in html, f"{where}: nested quotes"
        assert "Call arguments:</p>" not in prose, f"{where}: run-on Call arguments"


def _local_targets(html: str) -> list[str]:
    """The href and src values of a page that point inside the site."""
    targets = re.findall(r'(?:href|src)="([^"]*)"', html)
    return [
        target
        for target in targets
        if target
        and not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target)  # http:, data:, ...
        and not target.startswith(("//", "#"))
    ]


def test_no_broken_link_in_the_site(site: Path) -> None:
    """Every internal href and src of the built site reaches a file."""
    broken = []
    for html_file in sorted(site.rglob("*.html")):
        html = html_file.read_text(encoding="utf-8")
        for target in _local_targets(html):
            path = target.split("#", 1)[0].split("?", 1)[0]
            # 404.html links from the site's root (it is served at any depth).
            base = site if path.startswith("/") else html_file.parent
            resolved = (base / path.lstrip("/")).resolve()
            if resolved.is_dir():
                resolved = resolved / "index.html"
            if not resolved.is_file():
                broken.append(f"{html_file.relative_to(site)} -> {target}")
    assert not broken, f"{len(broken)} broken links: {broken[:20]}"
    assert len(list(site.rglob("*.html"))) > 100  # the API pages are there


#: The opening or closing line of a fenced code block, and what follows it.
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*(.*)$")


def _untagged_code_blocks(markdown: str) -> list[int]:
    """The line numbers of the fenced code blocks that name no language."""
    untagged, fence = [], None
    for number, line in enumerate(markdown.splitlines(), start=1):
        match = _FENCE.match(line)
        if not match:
            continue
        marks, info = match.group(1), match.group(2).strip()
        if fence is None:
            fence = marks
            if not info:
                untagged.append(number)
        elif marks[0] == fence[0] and len(marks) >= len(fence) and not info:
            fence = None
    return untagged


def test_every_code_block_names_its_language() -> None:
    """An untagged block gets no colours (or guessed ones): each names its
    language, `text` for output and messages."""
    assert _untagged_code_blocks("```\na\n```\n```python\nb\n```\n    ```\n") == [1, 7]
    untagged = [
        f"{path.relative_to(REPO)}:{line}"
        for path in sorted(DOCS.rglob("*.md"))
        for line in _untagged_code_blocks(path.read_text(encoding="utf-8"))
    ]
    assert not untagged, (
        "give these code blocks a language (```bash, ```python, ```json, "
        f"```text): {untagged}"
    )


def test_the_site_loads_no_script_or_style_from_elsewhere(site: Path) -> None:
    """MathJax, the code colours and every script and style sheet come from
    the site itself, so that it works offline (docs/offline_assets_hook.py)."""
    remote = set()
    for html_file in sorted(site.rglob("*.html")):
        html = html_file.read_text(encoding="utf-8")
        remote.update(re.findall(r'<script\b[^>]*\bsrc="((?:https?:)?//[^"]+)"', html))
        for link in re.findall(r"<link\b[^>]*>", html):
            if 'rel="stylesheet"' in link:
                remote.update(re.findall(r'href="((?:https?:)?//[^"]+)"', link))
    assert not remote, f"loaded from the network: {sorted(remote)}"
    assert (site / "assets" / "mathjax" / "tex-mml-chtml.js").is_file()
    assert (site / "assets" / "mathjax" / "output" / "chtml" / "fonts").is_dir()
    assert ".highlight .k" in (site / "stylesheets" / "pygments.css").read_text()
    decoding = (site / "decoding" / "index.html").read_text(encoding="utf-8")
    assert '<span class="kn">import</span>' in decoding  # coloured while built


#: Site page -> the least number of equations MathJax must typeset there:
#: Eq. 1 and on in notebook 01, alpha in 02, section 1 of 06 (the notebooks'
#: Markdown cells, `$...$`), and pages written with pymdownx.arithmatex.
MATH_PAGES = {
    "examples/01_quickstart/": 10,
    "examples/02_translation/": 3,
    "examples/06_image_transformer/": 10,
    "concepts/image-transformer/": 20,
    "concepts/caching/": 2,
}


def _chromium() -> str:
    """The system Chromium that Playwright drives (no browser download)."""
    pytest.importorskip("playwright.sync_api")
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        pytest.skip("no Chromium: apt-get install chromium")
    return browser


@pytest.mark.slow
def test_math_and_code_render_offline_in_a_browser(site: Path) -> None:
    """Headless Chromium with every request off the machine cut: the math of
    the notebooks and pages is typeset (MathJax's `mjx-container` elements, no
    `$` or `\\(` left in the typeset text) and code is coloured."""
    from playwright.sync_api import sync_playwright

    browser_path = _chromium()

    class QuietHandler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(site))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}/"
    left_the_machine: list[str] = []

    def local_only(route) -> None:
        if route.request.url.startswith(base):
            route.continue_()
        else:
            left_the_machine.append(route.request.url)
            route.abort()

    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=browser_path, args=["--no-sandbox"]
            )
            page = browser.new_page()
            page.route("**/*", local_only)
            for path, least in MATH_PAGES.items():
                page.goto(base + path)
                page.wait_for_function("() => window.MathJax?.startup?.promise")
                page.evaluate("() => MathJax.startup.promise")
                typeset = page.locator("mjx-container").count()
                assert typeset >= least, f"{path}: {typeset} equations typeset"
                raw = page.evaluate(
                    """() => [...document.querySelectorAll(
                           '.jp-RenderedMarkdown, .arithmatex')]
                         .map(e => e.innerText)
                         .filter(t => /\\$|\\\\\\(|\\\\\\[/.test(t))"""
                )
                assert not raw, f"{path}: math left as TeX: {raw[:3]}"
            page.goto(base + "decoding/")
            colours = page.evaluate(
                """() => new Set([...document.querySelectorAll(
                       '.highlight code span[class]')]
                     .map(e => getComputedStyle(e).color)).size"""
            )
            assert colours >= 3, f"decoding/: code in {colours} colours"
            browser.close()
    finally:
        server.shutdown()
    assert not left_the_machine, f"requests off the machine: {left_the_machine}"


def test_every_command_page_has_an_example_that_runs_as_written() -> None:
    """Each command's page shows one example above its ``--help``: every
    `keras-transformer` line uses options of that command's ``--help`` and
    configs that are in configs/."""
    hook = _api_hook()
    commands = {name for name, _, _ in hook.command_modules()}
    assert set(hook.COMMAND_EXAMPLES) == commands
    for name, (example, what_it_does) in hook.COMMAND_EXAMPLES.items():
        assert what_it_does.strip(), name
        lines = example.replace("\\\n", " ").splitlines()
        assert any(f"keras-transformer {name} " in line for line in lines), name
        for line in lines:
            command = re.search(r"keras-transformer ([\w-]+)(.*)", line)
            assert command, f"{name}: {line!r} runs no keras-transformer command"
            used, arguments = command.group(1), command.group(2)
            options = set(re.findall(r"(?<![\w-])--[\w-]+", hook.command_help(used)))
            unknown = set(re.findall(r"(?<![\w-])--[\w-]+", arguments)) - options
            assert not unknown, f"{name}: {used} has no {sorted(unknown)}"
            for config in re.findall(r"configs/\S+\.json", arguments):
                assert (REPO / config).is_file(), f"{name}: no {config}"
        page = hook._command_page(name, "keras_transformer.cli")
        assert page.index("## Example") < page.index("## Options"), name
