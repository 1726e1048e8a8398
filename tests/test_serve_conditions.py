"""`benchmarks/conditions.py`: the CPU line and the bounded background load
of `benchmarks/serve.py` (no model needed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import conditions  # noqa: E402

from keras_transformer import cpu  # noqa: E402

# Abridged /proc/cpuinfo of three x86 CPUs and an ARM one.
EPYC_AVX2 = """processor	: 0
vendor_id	: AuthenticAMD
model name	: AMD EPYC 7B12
flags		: fpu vme sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 bmi2
processor	: 1
model name	: AMD EPYC 7B12
flags		: fpu avx2 avx512f
"""
XEON_VNNI = """model name	: Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz
flags		: fpu avx avx2 avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni
"""
SAPPHIRE_RAPIDS = """model name	: Intel(R) Xeon(R) Platinum 8480+
flags		: avx2 avx512f avx512_vnni avx_vnni amx_bf16 amx_tile amx_int8
"""
ARM = """processor	: 0
BogoMIPS	: 50.00
Features	: fp asimd evtstrm aes pmull sha1 sha2 crc32
"""


@pytest.mark.parametrize(
    "text, model, sets",
    [
        (EPYC_AVX2, "AMD EPYC 7B12", ("AVX2",)),
        (
            XEON_VNNI,
            "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz",
            ("AVX2", "AVX-512F", "AVX512_VNNI"),
        ),
        (
            SAPPHIRE_RAPIDS,
            "Intel(R) Xeon(R) Platinum 8480+",
            (
                "AVX2",
                "AVX-512F",
                "AVX512_VNNI",
                "AVX_VNNI",
                "AMX-TILE",
                "AMX-INT8",
                "AMX-BF16",
            ),
        ),
    ],
)
def test_cpu_flags_name_the_instruction_sets(
    text: str, model: str, sets: tuple
) -> None:
    info = cpu.parse_cpuinfo(text)
    # Only the first processor's flags count (the EPYC's second lists avx512f).
    assert info == cpu.CpuInfo(model, sets)
    assert info.describe() == f"{model} ({', '.join(sets)})"


def test_a_cpu_without_the_sets_says_so() -> None:
    info = cpu.parse_cpuinfo(ARM)
    assert info.instruction_sets == ()
    assert "none of AVX2/AVX-512/VNNI/AMX" in info.describe()
    assert info.model  # the platform's name stands in for a missing model name


def test_this_machines_cpu_line() -> None:
    info = cpu.cpu_info()
    assert info.model
    assert cpu.cpu_info("/nonexistent/cpuinfo").instruction_sets == ()


AVX2 = cpu.CpuInfo("AVX2 CPU", ("AVX2",))
VNNI = cpu.CpuInfo("VNNI CPU", ("AVX2", "AVX-512F", "AVX512_VNNI"))


@pytest.mark.parametrize(
    ("info", "environ", "saturate"),
    [
        (AVX2, {}, True),
        (VNNI, {}, False),
        (cpu.CpuInfo("Alder Lake", ("AVX2", "AVX_VNNI")), {}, False),
        (cpu.CpuInfo("ARM", ()), {}, False),
        (VNNI, {"ONEDNN_MAX_CPU_ISA": "avx2"}, True),
        (VNNI, {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI"}, False),
        (VNNI, {"MKL_ENABLE_INSTRUCTIONS": "AVX2"}, True),
        (VNNI, {"MKL_ENABLE_INSTRUCTIONS": "avx512"}, True),  # AVX-512, no VNNI
        (VNNI, {"MKL_ENABLE_INSTRUCTIONS": "AVX512_E1"}, False),  # with VNNI
        (VNNI, {"CT2_FORCE_CPU_ISA": "AVX2"}, False),  # CTranslate2's own kernels
    ],
)
def test_which_cpus_saturate_int8_products(info, environ, saturate) -> None:
    assert cpu.int8_products_saturate(info, environ) is saturate


class _FakeCTranslate2:
    def __init__(self, *types: str) -> None:
        self.types = set(types)

    def get_supported_compute_types(self, device: str) -> set[str]:
        assert device == "cpu"
        return self.types


@pytest.mark.parametrize(
    ("saturate", "backend_types", "expected"),
    [
        (False, ("int8", "float32"), "default"),  # VNNI or AMX: int8 itself
        (True, ("int8", "int16", "float32"), "int16"),  # MKL: its int16 GEMM
        (True, ("int8", "float32"), "float32"),  # oneDNN only: no int16
    ],
)
def test_int8_weights_compute_in_a_type_that_does_not_saturate(
    saturate: bool,
    backend_types: tuple[str, ...],
    expected: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from keras_transformer.export import ctranslate2 as ct2_export

    monkeypatch.setattr(ct2_export, "int8_products_saturate", lambda: saturate)
    fake = _FakeCTranslate2(*backend_types)
    assert ct2_export.int8_compute_type(fake) == expected


def test_mkl_is_preferred_only_where_needed_and_not_over_the_user(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(sys.modules, "ctranslate2", raising=False)
    capped = {"ONEDNN_MAX_CPU_ISA": "AVX2"}
    if "AVX2" in cpu.cpu_info().instruction_sets:
        assert cpu.prefer_mkl_for_int8(capped) is True
        assert capped["CT2_USE_MKL"] == "1"
    chosen = {"ONEDNN_MAX_CPU_ISA": "AVX2", "CT2_USE_MKL": "0"}
    assert cpu.prefer_mkl_for_int8(chosen) is False
    assert chosen["CT2_USE_MKL"] == "0"  # the user's choice stands
    monkeypatch.setitem(sys.modules, "ctranslate2", object())
    late = {"ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert cpu.prefer_mkl_for_int8(late) is False  # read on import: too late
    assert "CT2_USE_MKL" not in late


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, reaped or not, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _wait_gone(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_busy_processes_run_and_stop_with_the_block() -> None:
    with conditions.BackgroundLoad(2) as load:
        assert len(load.pids) == 2
        assert all(_alive(pid) for pid in load.pids)
        # They do work (given time: the machine may be busy already).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(
            _cpu_seconds(pid) > 0.2 for pid in load.pids
        ):
            time.sleep(0.2)
        assert all(_cpu_seconds(pid) > 0.2 for pid in load.pids)
        pids = load.pids
    assert not any(_alive(pid) for pid in pids)
    assert all(p.exitcode == 0 for p in load.processes)  # stopped, not killed


def test_busy_processes_stop_on_an_exception() -> None:
    with pytest.raises(RuntimeError), conditions.BackgroundLoad(2) as load:
        pids = load.pids
        raise RuntimeError("the measurement failed")
    assert not any(_alive(pid) for pid in pids)


def test_a_busy_process_stops_at_its_time_limit() -> None:
    with conditions.BackgroundLoad(1, time_limit=0.5) as load:
        assert _wait_gone(load.pids, 20) == []
        assert load.processes[0].exitcode == 0


def test_no_busy_process_outlives_the_script() -> None:
    """Ctrl-C and a kill of the script that started them: none survives."""
    script = textwrap.dedent(
        f"""
        import signal, sys, time
        # Ctrl-C as in a terminal: a CI job started in the background runs
        # with SIGINT ignored, and Python keeps an inherited SIG_IGN.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.path.insert(0, {str(BENCHMARKS)!r})
        import conditions
        if __name__ == "__main__":
            with conditions.BackgroundLoad(2) as load:
                print(*load.pids, flush=True)
                time.sleep(120)
        """
    )
    for how in (signal.SIGINT, signal.SIGKILL):
        process = subprocess.Popen(
            [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True
        )
        pids = [int(p) for p in process.stdout.readline().split()]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        process.send_signal(how)
        process.wait(30)
        process.stdout.close()
        assert _wait_gone(pids, 20) == [], how


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="processes"):
        conditions.BackgroundLoad(-1)
    with pytest.raises(ValueError, match="time_limit"):
        conditions.BackgroundLoad(1, time_limit=0)


def test_serve_prints_and_records_its_conditions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import argparse

    import serve

    for name in serve.ISA_CAPS:
        monkeypatch.delenv(name, raising=False)
    lines = serve._conditions(
        argparse.Namespace(ctranslate2_threads=2, background_load=3),
        {"tf_intra_op": 1, "tf_inter_op": 0, "OMP_NUM_THREADS": "1"},
        {"before the serving process": 0.5, "after the serving process": 3.25},
    )
    assert lines[0] == f"cpu: {cpu.cpu_info().describe()}"
    assert "TensorFlow intra-op 1, inter-op 0" in lines[1]
    assert "CTranslate2 intra_threads 2" in lines[1]
    assert "OMP_NUM_THREADS=1" in lines[1]
    assert "background load: 3 busy processes" in lines[1]
    assert lines[2] == (
        "load average (1 min): 0.5 before the serving process, "
        "3.2 after the serving process"
    )
    # A run with the libraries held to fewer instruction sets says so.
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")
    held = serve._conditions(
        argparse.Namespace(ctranslate2_threads=0, background_load=0),
        {"tf_intra_op": 0, "tf_inter_op": 0},
        {},
    )[0]
    assert held == (
        f"cpu: {cpu.cpu_info().describe()}; the libraries held below it by "
        "ONEDNN_MAX_CPU_ISA=AVX2, MKL_ENABLE_INSTRUCTIONS=AVX2"
    )


def test_serve_without_its_test_set_is_one_line_naming_the_flag(
    tmp_path: Path,
) -> None:
    """Without a local copy of the data (and no download) serve.py ended in
    a traceback; it says what is missing and which flag gives it."""
    import argparse

    import serve

    args = argparse.Namespace(workdir=None, data_dir=str(tmp_path), split=None)
    with pytest.raises(SystemExit) as stopped:
        serve._test_sources(args)
    message = str(stopped.value)
    assert message.startswith("serve.py: ") and "\n" not in message
    assert str(tmp_path) in message and message.endswith("Here: --data-dir FOLDER.")


def test_the_serving_process_module_imports_nothing_of_the_package() -> None:
    """serve.py's child runs this module's top level: it must load the
    SavedModels with TensorFlow alone (the benchmark refuses otherwise)."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import serve; "
        "print(sorted(m for m in sys.modules if m.startswith('keras_transformer')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(BENCHMARKS)],
        capture_output=True,
        text=True,
        cwd=BENCHMARKS,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_serve_merges_the_rows_of_its_serving_processes() -> None:
    """Each CTranslate2 model but float32 runs in a serving process of its
    own; their rows are merged into one table, the load taken at the start
    of the first process and the end of the last."""
    import serve

    def part(label: str, seconds: float, start: float, end: float) -> dict:
        rows = {"seconds": {label: [seconds]}, "translations": {label: ["x"]}}
        return {
            "load_start": start,
            "load_end": end,
            "file_order": rows,
            "sorted": {k: dict(v) for k, v in rows.items()},
            "single": {k: dict(v) for k, v in rows.items()},
            "first_calls": {label: 1.0},
            "compute_types": {label: {"a": "default", "b": "int16"}[label]},
            "ctranslate2_imports": [f"keras_transformer.{label}"],
        }

    merged = serve._merge([part("a", 1.0, 0.5, 0.7), part("b", 2.0, 0.9, 1.4)])
    assert merged["load_start"] == 0.5 and merged["load_end"] == 1.4
    for order in ("file_order", "sorted", "single"):
        assert merged[order]["seconds"] == {"a": [1.0], "b": [2.0]}
        assert merged[order]["translations"] == {"a": ["x"], "b": ["x"]}
    assert merged["first_calls"] == {"a": 1.0, "b": 1.0}
    assert merged["compute_types"] == {"a": "default", "b": "int16"}
    assert merged["ctranslate2_imports"] == [
        "keras_transformer.a",
        "keras_transformer.b",
    ]
