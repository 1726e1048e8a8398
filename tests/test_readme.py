"""The README's promises: its usage example runs, its commands exist."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_usage_example_runs():
    usage = README.split("## Usage", 1)[1]
    code = re.search(r"```python\n(.*?)```", usage, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102
    assert namespace["model"].output_shape == (None, None, 8000)
    assert namespace["classifier"].output_shape == (None, 2)


def test_quickstart_has_exactly_two_commands_that_the_makefile_defines():
    quickstart = README.split("## Quickstart", 1)[1].split("##", 1)[0]
    block = re.search(r"```bash\n(.*?)```", quickstart, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.splitlines()]
    commands = [command for command in commands if command]
    assert commands == ["make demo", "make test"]
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for target in ("demo", "test"):
        assert re.search(rf"^{target}:", makefile, re.M)


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^make test\b", ci, re.M)
