"""`benchmarks/gpu_check.sh`: its dry run on the CPU prints every row of the
GPU check, passes the two-device comparison and writes its record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import gpu_check  # noqa: E402

#: (part, setting) of every row the table must hold.
ROWS = [
    *(
        (f"training {precision}", setting)
        for precision in gpu_check.PRECISIONS
        for setting in ("no XLA", "XLA")
    ),
    (gpu_check.TWO_DEVICES, f"{gpu_check.MIRRORED_UPDATES} updates"),
    *(
        (f"decoding {search} (cached)", setting)
        for search in ("greedy", "beam 4")
        for setting in ("no XLA", "XLA")
    ),
    ("serving SavedModel", "16 sentences"),
    ("serving CTranslate2 float32 (cpu)", "16 sentences"),
]


@pytest.mark.parametrize(
    "name, entry",
    [
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA H200 NVL", "H200 NVL"),
    ],
)
def test_the_peak_is_found_by_the_gpus_name(name: str, entry: str) -> None:
    found, peaks = gpu_check.datasheet_peaks(name)
    assert found == entry
    assert peaks["fp32"] < peaks["tf32"] < peaks["bf16"] == peaks["fp16"]


def test_an_unknown_gpu_has_no_peak() -> None:
    assert gpu_check.datasheet_peaks("NVIDIA A100-SXM4-80GB") is None


def test_training_flops_of_base_count_every_matrix_product() -> None:
    from keras_transformer.models import build_transformer, presets

    config = presets["base"]
    per_token = gpu_check.training_flops(config, 1, 1)
    assert gpu_check.training_flops(config, 4, 1) == 4 * per_token
    # 6 FLOPs per weight of the products per token (the embedding's only as
    # the output projection): between 6 x the weights without the embedding
    # and 6 x all of them, at length 1 where attention scores cost little.
    weights = build_transformer(config).count_params()
    embedding = config.vocabulary_size * config.d_model
    assert 6 * (weights - embedding) < per_token <= 6 * weights * 1.01


@pytest.mark.slow
def test_dry_run_prints_every_row_and_passes(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable, "TF_CPP_MIN_LOG_LEVEL": "3"}
    found = subprocess.run(
        ["bash", "benchmarks/gpu_check.sh", "--dry-run", "--record-dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=1200,
    )
    assert found.returncode == 0, found.stdout[-3000:] + found.stderr[-3000:]
    lines = found.stdout.splitlines()
    assert lines[0].startswith("dry run on the CPU; peak: a measured float32 matmul")
    # Fixed columns: part, setting (16), value (12), 2 spaces, unit (12), share (8).
    width = gpu_check.PART_WIDTH
    table = {
        (line[:width].strip(), line[width : width + 16].strip()): line for line in lines
    }
    for part, setting in ROWS:
        line = table[part, setting]
        value = float(line[width + 16 : width + 28])
        share = line[width + 42 : width + 50].strip()
        if part == gpu_check.TWO_DEVICES:
            assert 0 <= value <= gpu_check.WEIGHT_TOLERANCE, line
            assert "passed: 1 device vs 2 replicas" in line
        else:
            assert value > 0, line
        if part.startswith("training"):
            assert share.endswith("%") and float(share[:-1]) > 0, line
    assert "two-device check: passed" in lines
    record = json.loads((tmp_path / "gpu_check.json").read_text(encoding="utf-8"))
    assert record["machine"].startswith("no GPU (dry run)")
    assert record["sample"].startswith("preset tiny with 1 layer(s) each side:")
    assert record["figures"]["two_devices_passed"] == 1
    for key in (
        "training_mixed_bfloat16_xla_tokens_per_s",
        "training_float32_graph_percent_of_peak",
        "decoding_beam4_xla_sentences_per_s",
        "serving_ctranslate2_seconds",
        "serving_savedmodel_seconds",
    ):
        assert record["figures"][key] > 0, key
