"""What a `pgrecall` process imports before it does anything: not the `openai` package (about
0.85 s of a start on the 2-core VM) unless a judge or an extraction model is made."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _imported(code: str) -> set[str]:
    """The top-level packages a fresh interpreter holds after running `code`."""
    script = (
        textwrap.dedent(code) + "\nprint(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", "import sys\n" + script],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return set(done.stdout.split())


def test_the_server_and_every_command_start_without_openai() -> None:
    loaded = _imported("import app.main, app.cli.commands, app.runtime")
    assert "app" in loaded and "fastapi" in loaded  # the stack itself was imported
    assert "openai" not in loaded


def test_making_a_judge_imports_openai() -> None:
    loaded = _imported(
        """
        from app.adapters.judge import JudgeLLM
        JudgeLLM(model="m", base_url="http://127.0.0.1:9", api_key=None, timeout_s=1.0)
        """
    )
    assert "openai" in loaded
