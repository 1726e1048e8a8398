#!/usr/bin/env python3
"""Screenshots of TensorBoard, taken with headless Chromium.

Trains two tiny runs of `configs/dates_tiny.json` that differ in one setting
(600 updates each, warm-up 100 or 400 updates), links their log folders
under a neutral folder (``/tmp/kt/runs/<run>``, the only path TensorBoard
shows), starts TensorBoard on 127.0.0.1 and takes, with Playwright driving
the system Chromium:

* ``docs/images/tensorboard_scalars.png``: loss, BLEU and the learning rate
  of Eq. 7 of both runs, unsmoothed (smoothing 0) and each chart fitted to
  all its data ("ignore outliers" off);
* ``docs/images/tensorboard_attention.png``: the encoder-decoder attention
  image of the last layer, every head in a grid;
* ``docs/images/tensorboard_hparams.png``: the HParams table of the two runs,
  the settings that differ and their validation scores.

(The docs site itself is checked in Chromium by
``tests/test_docs.py::test_math_and_code_render_offline_in_a_browser``.)

Usage (from the repository root; ``apt-get install chromium`` and
``pip install playwright``: its own browser download is not needed)::

    .venv/bin/python docs/screenshots/take_screenshots.py

A run folder that already holds ``result.json`` is reused (``--retrain``
trains again). The PNGs are reduced to a 256-colour palette so each stays
well under 300 KB.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "dates_tiny.json"
IMAGES = ROOT / "docs" / "images"
#: The folder TensorBoard reads: one link per run, so the sidebar shows
#: this path and the run names only.
LOGDIR = Path("/tmp/kt/runs")
#: run name -> the `--set` overrides that make it differ from the other.
RUNS = {
    "warmup_100": ["model.optimizer.warmup_steps=100"],
    "warmup_400": ["model.optimizer.warmup_steps=400"],
}
#: The HParams columns shown (the settings that differ or matter) and the
#: validation metrics next to them.
HPARAMS = ("model.optimizer.warmup_steps", "model.d_model", "train.train_steps")


def _train(workdir: Path, steps: int, overrides: list[str]) -> None:
    """A tiny dates run: `steps` updates, validation every `steps // 4`."""
    per_epoch = max(1, steps // 4)
    settings = [
        f"train.train_steps={steps}",
        f"train.steps_per_epoch={per_epoch}",
        f"train.log_every={max(1, per_epoch // 10)}",
        "data.num_train_examples=5000",
        "data.num_eval_examples=200",
        "train.bleu_samples=100",
        "train.test_samples=200",
        *overrides,
    ]
    command = [sys.executable, "-m", "keras_transformer", "train", str(CONFIG)]
    command += ["--workdir", str(workdir)]
    for setting in settings:
        command += ["--set", setting]
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True, cwd=ROOT)


def _link_runs(workdir: Path, logdir: Path) -> None:
    """`logdir/<run>` -> `workdir/<run>/logs` for every run of `RUNS`."""
    logdir.mkdir(parents=True, exist_ok=True)
    for name in RUNS:
        link = logdir / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(workdir / name / "logs", target_is_directory=True)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _tensorboard_command() -> list[str]:
    script = Path(sys.executable).with_name("tensorboard")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "tensorboard.main"]


@contextlib.contextmanager
def _tensorboard(log_dir: Path) -> Iterator[str]:
    """Runs `tensorboard --logdir log_dir` on a free port; yields its address."""
    port = _free_port()
    process = subprocess.Popen(
        [
            *_tensorboard_command(),
            "--logdir",
            str(log_dir),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--reload_interval",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    address = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"tensorboard exited with {process.returncode}")
            try:
                with urllib.request.urlopen(f"{address}/data/runs", timeout=2) as r:
                    if b"validation" in r.read():
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"tensorboard did not answer on {address}")
            time.sleep(1)
        time.sleep(3)  # let it finish loading every run
        yield address
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _shrink(path: Path) -> None:
    """A 256-colour palette: screenshots of flat colours lose nothing visible."""
    from PIL import Image

    with Image.open(path) as image:
        small = image.convert("RGB").quantize(colors=256, dither=Image.Dither.NONE)
    small.save(path, optimize=True)


def _check_boxes(page: Any, wanted: set[str]) -> None:
    """Shows exactly the `wanted` hyperparameter columns of the HParams table."""
    for box in page.locator("tf-hparams-query-pane paper-checkbox").all():
        name = box.inner_text().strip()
        # Only the column boxes: the others filter by value or by status.
        if not name.startswith(("data.", "model.", "train.")):
            continue
        checked = box.get_attribute("aria-checked") == "true"
        if checked != (name in wanted):
            box.click()


def _tensorboard_shots(page: Any, address: str, output: Path) -> list[Path]:
    """The scalars, attention and HParams pictures of the TensorBoard at `address`."""
    shots = []
    page.set_viewport_size({"width": 1400, "height": 760})
    page.goto(
        f"{address}/#scalars&_smoothingWeight=0&tagFilter=%5E(loss%7Cbleu%7Clearning_rate)%24"
    )
    page.wait_for_timeout(5000)
    outliers = page.get_by_text("Ignore outliers in chart scaling")
    outliers.click()  # on by default (kept in local storage, not the URL)
    page.wait_for_timeout(3000)
    shots.append(output / "tensorboard_scalars.png")
    page.screenshot(path=str(shots[-1]))

    page.set_viewport_size({"width": 1400, "height": 640})
    # One run, the last layer, at the image's own size.
    page.goto(
        f"{address}/#images&tagFilter=attention%2Fencoder_decoder%2Flayer_1"
        "&regexInput=warmup_100%2Fvalidation"
    )
    page.wait_for_timeout(5000)
    page.get_by_text("Show actual image size").click()
    page.wait_for_timeout(3000)
    shots.append(output / "tensorboard_attention.png")
    page.screenshot(path=str(shots[-1]))

    page.set_viewport_size({"width": 1760, "height": 600})
    page.goto(f"{address}/#hparams")
    page.wait_for_timeout(6000)
    _check_boxes(page, set(HPARAMS))
    page.wait_for_timeout(2000)
    shots.append(output / "tensorboard_hparams.png")
    # The table only (the query pane beside it scrolled while its boxes
    # were clicked): its header, one row per run.
    table = page.locator("tf-hparams-sessions-pane").bounding_box()
    page.screenshot(
        path=str(shots[-1]),
        clip={"x": table["x"], "y": table["y"], "width": table["width"], "height": 200},
    )
    return shots


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/kt/train"))
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--output", type=Path, default=IMAGES)
    parser.add_argument("--retrain", action="store_true")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    for name, overrides in RUNS.items():
        if args.retrain or not (args.workdir / name / "result.json").is_file():
            _train(args.workdir / name, args.steps, overrides)
    _link_runs(args.workdir.resolve(), LOGDIR)
    browser_path = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser_path is None:
        raise SystemExit("Chromium not found: apt-get install chromium")
    args.output.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=browser_path, args=["--no-sandbox"]
        )
        page = browser.new_page()
        with _tensorboard(LOGDIR) as address:
            shots = _tensorboard_shots(page, address, args.output)
        browser.close()
    for path in shots:
        _shrink(path)
        print(f"{path}: {path.stat().st_size // 1024} KB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
