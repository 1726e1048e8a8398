"""Run folders, SavedModels and `.keras` files of an earlier layout still load.

`tests/scripts/old_artifacts.py` writes them with the package as it was at
`REVISION` (the last revision before the package was split into its floors)
and checks them with this checkout: same translations, same logits, and the
old run resumes.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.training.helpers import REPO_ROOT

REVISION = "4ab62fe"


def _has_revision() -> bool:
    found = subprocess.run(
        ["git", "cat-file", "-e", f"{REVISION}^{{commit}}"],
        cwd=REPO_ROOT,
        capture_output=True,
    )
    return found.returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(
    not _has_revision(), reason=f"a shallow clone: {REVISION} is not in its history"
)
def test_what_the_earlier_layout_wrote_still_loads():
    completed = subprocess.run(
        [sys.executable, "tests/scripts/old_artifacts.py", "--revision", REVISION],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr[-3000:]
    lines = completed.stdout.strip().splitlines()
    assert len(lines) == 4 and all(line.startswith("ok") for line in lines), lines
