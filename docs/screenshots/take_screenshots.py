#!/usr/bin/env python3
"""Screenshots of TensorBoard for docs/training.md.

Trains a tiny run (`configs/dates_tiny.json`, a few hundred updates), starts
TensorBoard on 127.0.0.1 with a free port, takes headless Chromium
screenshots of its dashboards and stops TensorBoard again:

* ``docs/images/tensorboard_scalars.png``: the training and validation
  curves (loss, BLEU, learning rate);
* ``docs/images/tensorboard_attention.png``: the encoder-decoder attention
  image of the last layer, every head in a grid;
* ``docs/images/tensorboard_hparams.png``: the HParams table, the settings
  next to the validation BLEU, chrF and loss.

Usage (from the repository root; Chromium from Debian: ``apt-get install
chromium``)::

    .venv/bin/python docs/screenshots/take_screenshots.py
    .venv/bin/python docs/screenshots/take_screenshots.py --workdir /tmp/s --steps 600

A run folder that already holds ``result.json`` is reused (pass
``--retrain`` to train again). The PNGs are reduced to a 256-colour palette
so each stays well under 300 KB.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "dates_tiny.json"
IMAGES = ROOT / "docs" / "images"

#: name -> (TensorBoard address after the port, window size). The SCALARS
#: and IMAGES dashboards draw in headless Chromium; the charts of TIME
#: SERIES stay blank there (they are drawn in a worker).
SHOTS = {
    "tensorboard_scalars": (
        "/#scalars&tagFilter=%5E(loss%7Cbleu%7Clearning_rate)%24",
        (1400, 750),
    ),
    "tensorboard_attention": (
        "/#images&tagFilter=attention%2Fencoder_decoder",
        (1400, 640),
    ),
    "tensorboard_hparams": ("/#hparams", (2000, 300)),
}


def _train(workdir: Path, steps: int) -> None:
    """A tiny dates run: `steps` updates, validation every `steps // 4`."""
    per_epoch = max(1, steps // 4)
    command = [
        sys.executable,
        "-m",
        "keras_transformer",
        "train",
        str(CONFIG),
        "--workdir",
        str(workdir),
        "--set",
        f"train.train_steps={steps}",
        "--set",
        f"train.steps_per_epoch={per_epoch}",
        "--set",
        f"train.log_every={max(1, per_epoch // 10)}",
        "--set",
        "data.num_train_examples=5000",
        "--set",
        "data.num_eval_examples=200",
        "--set",
        "train.bleu_samples=100",
        "--set",
        "train.test_samples=200",
        "--set",
        "model.optimizer.warmup_steps=200",
    ]
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True, cwd=ROOT)


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


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    raise SystemExit("Chromium not found: apt-get install chromium")


def _screenshot(browser: str, url: str, size: tuple[int, int], path: Path) -> None:
    with tempfile.TemporaryDirectory() as profile:
        command = [
            browser,
            "--headless=new",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            f"--user-data-dir={profile}",
            f"--window-size={size[0]},{size[1]}",
            "--virtual-time-budget=20000",
            f"--screenshot={path}",
            url,
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            command.insert(1, "--no-sandbox")  # Chromium refuses root otherwise
        print("+", " ".join(command), flush=True)
        subprocess.run(
            command,
            check=True,
            timeout=180,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )


def _shrink(path: Path) -> None:
    """A 256-colour palette: screenshots of flat colours lose nothing visible."""
    from PIL import Image

    with Image.open(path) as image:
        small = image.convert("RGB").quantize(colors=256, dither=Image.Dither.NONE)
    small.save(path, optimize=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--output", type=Path, default=IMAGES)
    parser.add_argument("--retrain", action="store_true")
    args = parser.parse_args(argv)

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="kt_screenshots_"))
    if args.retrain or not (workdir / "result.json").is_file():
        _train(workdir, args.steps)
    browser = _chromium()
    args.output.mkdir(parents=True, exist_ok=True)
    with _tensorboard(workdir / "logs") as address:
        for name, (page, size) in SHOTS.items():
            path = args.output / f"{name}.png"
            _screenshot(browser, address + page, size, path)
            _shrink(path)
            print(f"{path}: {path.stat().st_size // 1024} KB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
