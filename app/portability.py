"""Is a native library portable across x86-64 CPUs? Finds AVX-512 code outside run-time dispatch.

A library built with `-march=native` on an AVX-512 machine uses zmm registers everywhere and
dies with SIGILL (signal 4) on CPUs without AVX-512. A portable pgvector uses them only in
functions it selects at run time after checking the CPU (`...Avx512...` in their names).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

_FUNCTION = re.compile(r"^[0-9a-f]+ <(?P<name>[^>]+)>:$")
_DISPATCHED = re.compile(r"avx512", re.IGNORECASE)


class DisassemblerMissingError(RuntimeError):
    """objdump (Debian package binutils) is not installed."""


def zmm_use_by_function(disassembly: str) -> Counter[str]:
    """Count the instructions that touch a zmm register, per function of an objdump listing."""
    counts: Counter[str] = Counter()
    function = "?"
    for line in disassembly.splitlines():
        header = _FUNCTION.match(line)
        if header:
            function = header.group("name")
        elif "%zmm" in line:
            counts[function] += 1
    return counts


def undispatched_avx512(disassembly: str) -> dict[str, int]:
    """Functions using AVX-512 registers that are not run-time-dispatched AVX-512 variants."""
    return {
        name: count
        for name, count in zmm_use_by_function(disassembly).items()
        if not _DISPATCHED.search(name)
    }


def disassemble(library: Path) -> str:
    """`objdump -d` of a shared library."""
    objdump = shutil.which("objdump")
    if objdump is None:
        raise DisassemblerMissingError("objdump not found: apt-get install binutils")
    result = subprocess.run(
        [objdump, "-d", "--no-show-raw-insn", str(library)],
        check=True,
        capture_output=True,
        text=True,
    )
    return result.stdout
