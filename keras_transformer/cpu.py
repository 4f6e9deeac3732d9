"""What the CPU at hand is: its model name and the features that decide which precision is
fastest (matrix units, bfloat16/float16 and int8 dot products). Standard library only."""

from __future__ import annotations

import platform


def _first_processor(cpuinfo: str = "/proc/cpuinfo") -> dict[str, str]:
    """The fields of the first processor's block of /proc/cpuinfo (empty if unreadable)."""
    fields: dict[str, str] = {}
    try:
        with open(cpuinfo) as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block is enough
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The model name with its family and model numbers: a cloud CPU may report only "AMD
    EPYC", which names several generations of different speed (family 25 is Zen 3/4, 26 is
    Zen 5), so figures from two hosts are told apart by the numbers."""
    fields = _first_processor(cpuinfo)
    name = fields.get("model name") or platform.processor() or "unknown"
    numbers = [f"{label} {fields[key]}" for key, label in
               (("cpu family", "family"), ("model", "model")) if fields.get(key)]
    return f"{name} ({', '.join(numbers)})" if numbers else name


# The CPU features that decide what reduced precision can gain: matrix units (AMX), bfloat16
# and float16 dot products (AVX-512 BF16/FP16) and int8 dot products (VNNI).
MATRIX_FLAGS = ("amx_tile", "amx_bf16", "amx_int8", "amx_fp16", "avx512f", "avx512_bf16",
                "avx512_fp16", "avx512_vnni", "avx_vnni", "avx2", "f16c")


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> dict[str, bool]:
    """Each of MATRIX_FLAGS: whether /proc/cpuinfo (lscpu's Flags) lists it."""
    flags = set(_first_processor(cpuinfo).get("flags", "").split())
    return {name: name in flags for name in MATRIX_FLAGS}
