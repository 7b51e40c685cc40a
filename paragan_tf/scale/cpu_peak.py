"""What this machine's CPU can do in theory: the ceiling no achieved FLOP/s may pass.

  peak = physical cores x clock x FLOP per cycle per core (dtype, ISA)

FLOP per cycle comes from the table below (vendor manuals; a fused multiply-add
is 2 FLOP). The clock is measured: under a hypervisor /proc/cpuinfo's "cpu MHz"
is the nominal TSC rate (2596 MHz on the 2-core AMD EPYC Zen 4 of docs/benchmarks.md,
whose cores this timing put at 3.66 GHz on 2026-11-23), so on x86-64 we time a
chain of dependent integer adds, each exactly one cycle on every x86 core since
the Pentium 4; elsewhere the clock is the "cpu MHz" line and the record says it
is assumed. The adds take a register, not an immediate: Intel cores since Golden
Cove fold `add reg, imm` chains at rename, and timed that way an Intel Xeon with
AMX (2026-11-25) "ran" at 25 GHz.

The benchmarks' machine record (benchmarks/machine.py) and the scale plan's
`this_cpu` device (scale/devices.py) both read it.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
import sys
import time
from typing import Dict, List, Optional

from paragan_tf.layout import rules as layout_lib

# FLOP per cycle per core, (float32, bfloat16), first matching row wins. bfloat16 without a
# bf16 dot-product unit converts to float32 and runs at the float32 rate.
FLOP_PER_CYCLE = (
    # (row name, vendor or None, required flags, fp32, bf16)
    ("Intel AMX (Sapphire Rapids+): 1024 bf16 FLOP/cycle in TMUL", "GenuineIntel",
     ("amx_bf16", "avx512f"), 64, 1024),
    ("Intel AVX-512, 2 FMA units x 16 fp32 lanes; VDPBF16PS 2x that", "GenuineIntel",
     ("avx512_bf16", "avx512f"), 64, 128),
    ("Intel AVX-512, 2 FMA units x 16 fp32 lanes", "GenuineIntel", ("avx512f",), 64, 64),
    ("AMD Zen 5 (family 26): 2 full-width 512-bit FMA pipes", "AuthenticAMD@26",
     ("avx512f",), 64, 128),
    ("AMD Zen 4: AVX-512 on 2 x 256-bit FMA pipes (16 fp32 FMA/cycle); VDPBF16PS 2x that",
     "AuthenticAMD", ("avx512_bf16", "avx512f"), 32, 64),
    ("x86 AVX2+FMA: 2 FMA units x 8 fp32 lanes", None, ("avx2", "fma"), 32, 32),
    ("x86 AVX: separate 8-lane add and multiply", None, ("avx",), 16, 16),
)

# xor rax, rax; loop: (add rax, rsi) x 200; dec rdi; jnz loop; ret: 200 dependent adds per
# turn (register operands: an immediate add can be folded by the renamer, see above).
_ADDS = 200
_CLOCK_CODE = (b"\x48\x31\xc0" + b"\x48\x01\xf0" * _ADDS + b"\x48\xff\xcf"
               + b"\x0f\x85" + (-(_ADDS * 3 + 3 + 6)).to_bytes(4, "little", signed=True)
               + b"\xc3")


def _cpuinfo_blocks() -> List[Dict[str, str]]:
    """/proc/cpuinfo as one field dictionary per logical CPU (empty off Linux)."""
    blocks = [{}]
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, colon, value = line.partition(":")
                if colon:
                    blocks[-1][key.strip()] = value.strip()
                elif blocks[-1]:  # a blank line ends a CPU's block
                    blocks.append({})
    except OSError:
        return []
    return [block for block in blocks if block]


def cpuinfo() -> Dict[str, str]:
    """The first logical CPU's /proc/cpuinfo fields."""
    return next(iter(_cpuinfo_blocks()), {})


def physical_cores() -> int:
    """Distinct (physical id, core id) pairs; logical CPUs when the kernel does not say."""
    cores = {(b.get("physical id"), b.get("core id")) for b in _cpuinfo_blocks()}
    cores.discard((None, None))
    return len(cores) or os.cpu_count() or 1


def measure_clock_ghz(turns: int = 20_000, repeats: int = 200) -> Optional[float]:
    """The core clock from a timed chain of dependent one-cycle adds (x86-64 Linux only):
    the fastest of `repeats` chains of about 1 ms each, short enough that on a loaded
    machine one of them runs within a time slice (chains of 11 ms read 2.10 GHz on the
    3.67 GHz Zen 4 under a load of 4, these 3.69)."""
    if platform.machine() not in ("x86_64", "AMD64") or not sys.platform.startswith("linux"):
        return None
    try:
        buf = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE
                        | mmap.PROT_EXEC)
    except (OSError, ValueError):  # W^X-hardened kernels refuse executable anonymous pages
        return None
    buf.write(_CLOCK_CODE)
    address = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    chain = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(address)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        chain(turns)
        best = min(best, time.perf_counter() - start)
    del chain
    return turns * _ADDS / best / 1e9


def theoretical_peak(clock_ghz: Optional[float] = None) -> dict:
    """Peak float32 and bfloat16 GFLOP/s of this machine's CPU cores, with how it was derived."""
    info = cpuinfo()
    flags = layout_lib.cpu_features()
    vendor = info.get("vendor_id", "")
    family = info.get("cpu family", "")
    row = next((r for r in FLOP_PER_CYCLE
                if (r[1] is None or r[1] in (vendor, f"{vendor}@{family}"))
                and all(f in flags for f in r[2])), None)
    clock_source = "measured: timed chain of dependent 1-cycle adds"
    if clock_ghz is None:
        clock_ghz = measure_clock_ghz()
    if clock_ghz is None:
        clock_ghz = float(info.get("cpu MHz", "nan")) / 1000
        clock_source = "assumed: /proc/cpuinfo cpu MHz"
    cores = physical_cores()
    if row is None:
        return dict(fp32_gflops=None, bf16_gflops=None, clock_ghz=clock_ghz,
                    clock_source=clock_source, cores=cores,
                    isa_row="unknown ISA: no FLOP/cycle entry")
    name, _, _, fp32, bf16 = row
    return dict(fp32_gflops=cores * clock_ghz * fp32, bf16_gflops=cores * clock_ghz * bf16,
                fp32_flop_per_cycle=fp32, bf16_flop_per_cycle=bf16, clock_ghz=clock_ghz,
                clock_source=clock_source, cores=cores, isa_row=name)
