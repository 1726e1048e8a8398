"""Run folders, SavedModels and `.keras` files of an earlier layout still load.

`tests/scripts/old_artifacts.py` writes them with the package as it was at
each of `REVISIONS` and checks them with this checkout: same translations,
same logits, and the old run resumes. The revisions: the last one before the
package was split into its floors, and the last one before the one engine
(one cache protocol, the decoding package).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.training.helpers import REPO_ROOT

REVISIONS = ("4ab62fe", "cefe180")


def _has_revision(revision: str) -> bool:
    found = subprocess.run(
        ["git", "cat-file", "-e", f"{revision}^{{commit}}"],
        cwd=REPO_ROOT,
        capture_output=True,
    )
    return found.returncode == 0


@pytest.mark.slow
@pytest.mark.parametrize("revision", REVISIONS)
def test_what_an_earlier_release_wrote_still_loads(revision: str):
    if not _has_revision(revision):
        pytest.skip(f"a shallow clone: {revision} is not in its history")
    completed = subprocess.run(
        [sys.executable, "tests/scripts/old_artifacts.py", "--revision", revision],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr[-3000:]
    lines = completed.stdout.strip().splitlines()
    assert len(lines) == 4 and all(line.startswith("ok") for line in lines), lines
