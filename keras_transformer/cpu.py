"""This machine's CPU: its model, its instruction sets and its int8 products.

int8 serving multiplies 8-bit activations by 8-bit weights and adds the
products in 32 bits. CPUs with VNNI (AVX512_VNNI, AVX_VNNI) or AMX do this in
one instruction. Without them, oneDNN's int8 GEMM (CTranslate2's backend on
CPUs that are not Intel's) multiplies with AVX2's ``vpmaddubsw``, which adds
each pair of products into 16 bits and saturates, and Intel MKL's does the
same on Intel CPUs: the int8 model then translates measurably worse (on the
tiny test model with the libraries held to AVX2, an Intel Xeon with AMX:
BLEU 19.7 through either library against 24.5 in float32). MKL's int16 GEMM
adds int16 products in 32 bits and keeps them exact (24.6 on the same model
and ISA), so `prefer_mkl_for_int8` points CTranslate2 at MKL on such CPUs
before it is imported, and the CTranslate2 translator computes int8 weights
in int16 there.

`cpu_info` names the CPU and which of `INSTRUCTION_SETS` it has (the machine
line of every results record, `results_records.describe_machine`). Standard
library only: the lowest floor of the package, below the records and the
exports.

Example:
    >>> parse_cpuinfo("model name : Some CPU\\nflags : fpu avx2 avx512f\\n")
    CpuInfo(model='Some CPU', instruction_sets=('AVX2', 'AVX-512F'))
    >>> int8_products_saturate(CpuInfo("Some CPU", ("AVX2",)), environ={})
    True
"""

from __future__ import annotations

import functools
import os
import platform
import sys
from collections.abc import Mapping
from dataclasses import dataclass

#: Instruction sets by the ``/proc/cpuinfo`` flag that announces each.
INSTRUCTION_SETS = {
    "avx2": "AVX2",
    "avx512f": "AVX-512F",
    "avx512_vnni": "AVX512_VNNI",
    "avx_vnni": "AVX_VNNI",
    "amx_tile": "AMX-TILE",
    "amx_int8": "AMX-INT8",
    "amx_bf16": "AMX-BF16",
}
#: The sets that add int8 products in 32 bits, with no saturating 16-bit step.
EXACT_INT8_SETS = ("AVX512_VNNI", "AVX_VNNI", "AMX-INT8")
#: ``ONEDNN_MAX_CPU_ISA`` values that hold oneDNN below VNNI (how a machine
#: with VNNI reproduces one without: ``ONEDNN_MAX_CPU_ISA=AVX2``).
_ONEDNN_ISAS_WITHOUT_VNNI = ("SSE41", "AVX", "AVX2", "AVX512_CORE")
#: ``MKL_ENABLE_INSTRUCTIONS`` values that hold Intel MKL below VNNI.
_MKL_ISAS_WITHOUT_VNNI = ("SSE4_2", "AVX", "AVX2", "AVX512")


@dataclass(frozen=True)
class CpuInfo:
    """A CPU's model name and which of `INSTRUCTION_SETS` it has."""

    model: str
    instruction_sets: tuple[str, ...]

    def describe(self) -> str:
        """One line: the model, then its instruction sets (or that it has none)."""
        sets = ", ".join(self.instruction_sets) or "none of AVX2/AVX-512/VNNI/AMX"
        return f"{self.model} ({sets})"


def parse_cpuinfo(text: str) -> CpuInfo:
    """The CPU of a ``/proc/cpuinfo`` text (its first processor's lines)."""
    model, flags = "", set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not model:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
    found = tuple(name for flag, name in INSTRUCTION_SETS.items() if flag in flags)
    return CpuInfo(model or platform.processor() or platform.machine(), found)


@functools.lru_cache(maxsize=4)
def cpu_info(path: str = "/proc/cpuinfo") -> CpuInfo:
    """This machine's CPU (no instruction sets where `path` cannot be read);
    read once per path."""
    try:
        with open(path, encoding="utf-8") as file:
            return parse_cpuinfo(file.read())
    except OSError:
        return CpuInfo(platform.processor() or platform.machine(), ())


def int8_products_saturate(
    info: CpuInfo | None = None, environ: Mapping[str, str] | None = None
) -> bool:
    """Whether int8 GEMMs (oneDNN's; MKL's on Intel) would saturate on this CPU.

    True on an x86 CPU with AVX2 and none of `EXACT_INT8_SETS`, or where
    ``ONEDNN_MAX_CPU_ISA`` or ``MKL_ENABLE_INSTRUCTIONS`` holds a library
    below VNNI. False elsewhere (ARM CPUs multiply int8 with other kernels).
    ``CT2_FORCE_CPU_ISA`` does not count: it picks CTranslate2's own
    kernels, not its GEMM library's (measured: no saturation with it alone).
    """
    info = cpu_info() if info is None else info
    environ = os.environ if environ is None else environ
    if "AVX2" not in info.instruction_sets:
        return False
    capped = environ.get("ONEDNN_MAX_CPU_ISA", environ.get("DNNL_MAX_CPU_ISA", ""))
    if capped.upper() in _ONEDNN_ISAS_WITHOUT_VNNI:
        return True
    if environ.get("MKL_ENABLE_INSTRUCTIONS", "").upper() in _MKL_ISAS_WITHOUT_VNNI:
        return True
    return not set(EXACT_INT8_SETS) & set(info.instruction_sets)


def prefer_mkl_for_int8(environ: dict[str, str] | None = None) -> bool:
    """Points CTranslate2 at Intel MKL where int8 products saturate.

    MKL is CTranslate2's only CPU backend with an int16 GEMM, which keeps
    the sums exact where the int8 one saturates. Sets ``CT2_USE_MKL=1``
    when `int8_products_saturate` and neither the variable is set already
    nor ``ctranslate2`` imported (CTranslate2 reads it once, on import).
    Returns whether the variable was set by this call.
    """
    environ = os.environ if environ is None else environ
    if "CT2_USE_MKL" in environ or "ctranslate2" in sys.modules:
        return False
    if not int8_products_saturate(environ=environ):
        return False
    environ["CT2_USE_MKL"] = "1"
    return True


__all__ = [
    "EXACT_INT8_SETS",
    "INSTRUCTION_SETS",
    "CpuInfo",
    "cpu_info",
    "int8_products_saturate",
    "parse_cpuinfo",
    "prefer_mkl_for_int8",
]
