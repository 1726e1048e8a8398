"""mkdocs hook: one API page per public layer, model, loss, metric, schedule,
optimizer, callback and command, generated from the package's public names.

The names come from the modules themselves (``__all__``, or the public
classes and functions a module defines), read by griffe without importing
the package, so the reference cannot drift from the code: a new layer in
``keras_transformer.layers.__all__`` gets its page, its nav entry and its
line in the group's table at the next ``mkdocs build``. A command's page
shows its module docstring and its ``--help``. ``tests/test_api_docs.py``
checks the list against the imported package.

Each group has an index page (``api/<group>/index.md``): the module's
docstring, a table of its names with their one-line summaries, and the
module's constants. The pages are added to the site's files and to the nav
under "API reference" (after its overview); nothing is written to disk.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from mkdocs.structure.files import File, Files

REPO = Path(__file__).resolve().parents[1]
#: The section of mkdocs.yml's nav the groups are added to.
NAV_SECTION = "API reference"
#: The width ``--help`` is wrapped at on the command pages.
HELP_COLUMNS = 88
#: One worked example per command, shown above its ``--help``: the configs
#: of ``configs/`` and flags of the ``--help`` below it (tests/test_docs.py
#: checks both), each with what it does.
COMMAND_EXAMPLES = {
    "train": (
        "keras-transformer train configs/multi30k_de_en_fast.json "
        "--workdir runs/m30k_fast",
        "Trains the fast Multi30k German→English recipe into `runs/m30k_fast`; "
        "run again, the same command resumes a stopped run and returns at once "
        "from a finished one. `--set train.train_steps=500` changes one setting.",
    ),
    "evaluate": (
        "keras-transformer evaluate --workdir runs/m30k_fast --weights best \\\n"
        "    --split test_2016_flickr --beam-size 4 --alpha 0.6",
        "Translates Multi30k's test_2016_flickr with the weights of the best "
        "validation BLEU and "
        "beam 4, prints sacreBLEU and chrF with their signatures and saves the "
        "translations in the run folder.",
    ),
    "translate": (
        'echo "Ein Hund rennt über die Wiese." | '
        "keras-transformer translate --workdir runs/m30k_fast --weights best\n"
        "keras-transformer translate --workdir runs/m30k_fast --input news.de "
        "--output news.en",
        "Translates standard input, or a file one line per line, with beam 4 "
        "and α 0.6.",
    ),
    "score": (
        "keras-transformer score --workdir runs/m30k_fast --source news.de "
        "--target news.en \\\n    --output scores.txt",
        "Writes log P(target | source) of each pair of lines, then the "
        "log-probability of each subword token.",
    ),
    "complete": (
        "keras-transformer train configs/image_sample_patches.json "
        "--workdir runs/image_transformer\n"
        "keras-transformer complete --workdir runs/image_transformer "
        "--weights average \\\n    --given-rows 16 --output completions.png",
        "Trains the Image Transformer on photograph patches, then draws the "
        "lower half of held-out patches from their top 16 rows (Figure 1 of "
        "Parmar et al., 2018) into one grid.",
    ),
    "export": (
        "keras-transformer export --workdir runs/m30k_fast --weights best "
        "\\\n    --output exported/de_en/1",
        "Writes a SavedModel that translates raw strings with TensorFlow and "
        "TensorFlow Text only; `1` is the version folder TensorFlow Serving "
        "expects.",
    ),
    "classify": (
        "keras-transformer train configs/imdb.json --workdir runs/imdb\n"
        "keras-transformer classify --workdir runs/imdb --weights best "
        "--input reviews.txt",
        "Trains the IMDB sentiment classifier, then labels each line of "
        "`reviews.txt` `positive` or `negative` with P(positive), read as "
        "training read the reviews (the export's `classify` signature does "
        "the same).",
    ),
    "average-checkpoints": (
        "keras-transformer average-checkpoints --workdir runs/m30k_fast --last 5\n"
        "keras-transformer evaluate --workdir runs/m30k_fast --weights average",
        "Averages the last five checkpoints (§6.1 of the paper) into "
        "`runs/m30k_fast/averaged.weights.h5`, which `--weights average` of "
        "the other commands loads.",
    ),
}


@dataclass(frozen=True)
class Group:
    """A section of the API reference: one page per public name of its modules."""

    slug: str
    title: str
    modules: tuple[str, ...]
    intro: str


GROUPS = (
    Group(
        "layers",
        "Layers",
        ("keras_transformer.layers",),
        "The building blocks of Figure 1 as Keras 3 layers written with "
        "`keras.ops`, so that they run on every Keras backend; every mask is "
        'boolean with `True` meaning "may attend" (see '
        "[masks](../../concepts/masks.md)). The Image Transformer's pieces are "
        "explained in [the Image Transformer](../../concepts/image-transformer.md).",
    ),
    Group(
        "models",
        "Models",
        ("keras_transformer.models", "keras_transformer.models.classifier"),
        "The hyperparameters, the presets of Table 3, the model builders and "
        "the stacks that encode, decode and take the cached decoding step.",
    ),
    Group(
        "losses",
        "Losses",
        ("keras_transformer.losses",),
        "The label-smoothed cross-entropy of §5.4.",
    ),
    Group(
        "metrics",
        "Metrics",
        ("keras_transformer.metrics",),
        "Token-level metrics that ignore padding.",
    ),
    Group(
        "schedules",
        "Schedules and optimizers",
        ("keras_transformer.schedules", "keras_transformer.optimizers"),
        "The learning-rate schedule of Eq. 7 and the Adam settings of §5.3.",
    ),
    Group(
        "callbacks",
        "Callbacks",
        (
            "keras_transformer.training.fit_callbacks",
            "keras_transformer.training.callbacks",
            "keras_transformer.training.epoch_end",
            "keras_transformer.training.preemption",
            "keras_transformer.training.progress_logger",
        ),
        "Callbacks for a plain `model.fit` (checkpoint averaging, early "
        "stopping on validation BLEU), then the Keras callbacks of a training "
        "run: checkpoints, the NaN guard, validation, TensorBoard summaries "
        "and preemption.",
    ),
)
#: The command pages' group (their names come from `keras_transformer.cli`).
COMMANDS = Group(
    "commands",
    "Commands",
    ("keras_transformer.cli",),
    "The `keras-transformer` command line; each page gives the command's "
    "module documentation and its `--help`.",
)


#: The pages of this build, by group (filled by `on_config`).
_PAGES: dict[str, list[tuple[str, str, str]]] = {}
#: The public names of a module that are neither classes nor functions.
_CONSTANTS: dict[str, list[str]] = {}


def _load_package():
    import griffe

    return griffe.load(
        "keras_transformer",
        search_paths=[str(REPO)],
        resolve_aliases=True,
        resolve_external=False,
    )


def public_names(module) -> list[str]:
    """A griffe module's public names: its ``__all__`` or its own public members."""
    if module.exports is not None:
        return [str(name) for name in module.exports]
    return [
        name
        for name, member in module.members.items()
        if not name.startswith("_") and not member.is_alias
    ]


def api_pages() -> dict[str, list[tuple[str, str, str]]]:
    """The generated pages of each group: ``(page, dotted path, summary)``.

    A page for every public class and function of the group's modules;
    the constants appear on the group's index page instead (`constants`).
    """
    package = _load_package()
    pages: dict[str, list[tuple[str, str, str]]] = {}
    for group in GROUPS:
        entries = []
        for dotted in group.modules:
            module = package[dotted.removeprefix("keras_transformer.")]
            for name in public_names(module):
                member = module[name]
                if member.kind.value not in ("class", "function"):
                    _CONSTANTS.setdefault(dotted, []).append(name)
                    continue
                summary = (
                    member.docstring.value.split("\n")[0] if member.docstring else ""
                )
                entries.append(
                    (f"api/{group.slug}/{name}.md", f"{dotted}.{name}", summary)
                )
        pages[group.slug] = entries
    pages[COMMANDS.slug] = [
        (f"api/commands/{name}.md", module, summary)
        for name, module, summary in command_modules()
    ]
    return pages


def command_modules() -> list[tuple[str, str, str]]:
    """Each subcommand: ``(name, its module, its help line)``."""
    from keras_transformer.cli import COMMANDS as REGISTERED

    return [
        (name, entry.run.__module__, entry.help) for name, entry in REGISTERED.items()
    ]


def command_help(name: str) -> str:
    """``keras-transformer <name> --help``, wrapped at `HELP_COLUMNS`."""
    from keras_transformer.cli import COMMANDS as REGISTERED

    entry = REGISTERED[name]
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(HELP_COLUMNS)
    try:
        parser = argparse.ArgumentParser(
            prog=f"keras-transformer {name}", description=entry.help
        )
        entry.add_arguments(parser)
        return parser.format_help()
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous


def _object_page(dotted: str) -> str:
    return (
        f"::: {dotted}\n"
        "    options:\n"
        "      show_root_heading: true\n"
        "      show_root_full_path: false\n"
        "      heading_level: 1\n"
        "      show_source: true\n"
    )


def _command_page(name: str, module: str) -> str:
    command, what_it_does = COMMAND_EXAMPLES[name]
    return (
        f"# `keras-transformer {name}`\n\n"
        f"::: {module}\n"
        "    options:\n"
        "      show_root_heading: false\n"
        "      show_root_toc_entry: false\n"
        "      members: false\n\n"
        "## Example\n\n"
        f"```bash\n{command}\n```\n\n{what_it_does}\n\n"
        "## Options\n\n"
        f"```text\n{command_help(name)}```\n"
    )


def _index_page(group: Group, entries: list[tuple[str, str, str]]) -> str:
    lines = [
        f"# {group.title}",
        "",
        group.intro,
        "",
        "| name | what it is |",
        "|---|---|",
    ]
    for page, _, summary in entries:
        name = Path(page).stem
        label = f"keras-transformer {name}" if group is COMMANDS else name
        lines.append(f"| [`{label}`]({name}.md) | {summary.replace('|', '&#124;')} |")
    lines.append("")
    for dotted in group.modules:
        constants = _CONSTANTS.get(dotted)
        if group is COMMANDS or not constants:
            continue
        lines += [
            f"## Constants of `{dotted}`",
            "",
            f"::: {dotted}",
            "    options:",
            "      show_root_heading: false",
            "      show_root_toc_entry: false",
            "      show_docstring_description: false",
            "      heading_level: 3",
            f"      members: {constants}",
            "",
        ]
    return "\n".join(lines)


def nav_entries(pages: dict[str, list[tuple[str, str, str]]]) -> list[dict]:
    """The nav sections of the groups: the index page, then one entry per name."""
    entries = []
    for group in (*GROUPS, COMMANDS):
        section: list = [f"api/{group.slug}/index.md"]
        section += [{Path(page).stem: page} for page, _, _ in pages[group.slug]]
        entries.append({group.title: section})
    return entries


def on_config(config):
    _PAGES.clear()
    _CONSTANTS.clear()
    _PAGES.update(api_pages())
    for item in config["nav"]:
        if isinstance(item, dict) and NAV_SECTION in item:
            section = item[NAV_SECTION]
            section[1:1] = nav_entries(_PAGES)
            break
    else:
        raise ValueError(f"mkdocs.yml's nav has no {NAV_SECTION!r} section")
    return config


def on_files(files: Files, config) -> Files:
    for group in (*GROUPS, COMMANDS):
        entries = _PAGES[group.slug]
        files.append(
            File.generated(
                config,
                f"api/{group.slug}/index.md",
                content=_index_page(group, entries),
            )
        )
        for page, dotted, _ in entries:
            if group is COMMANDS:
                content = _command_page(Path(page).stem, dotted)
            else:
                content = _object_page(dotted)
            files.append(File.generated(config, page, content=content))
    return files
