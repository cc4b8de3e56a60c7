"""`python -m eval`: golden-case judging, CLI, the gate, artifacts and MLflow, on the real service.

The runs start their own throwaway embedded Postgres through eval.harness (about two seconds
each) and use the real embedder, so they measure what CI measures, on small subsets.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from app.db import user_session
from app.repositories.memory import MemoryRepository
from app.retrieval.budget import TRUNCATION_MARK, count_tokens
from app.retrieval.presets import PRESETS
from eval import golden_run, locomo_run
from eval.golden_run import Returned, judge, match_expected, ranked_keys
from eval.harness import running_service
from eval.runner import _only_samples, eval_settings, main, parse_args, run

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = {
    "cases.csv",
    "recall_at_k.png",
    "latency_histogram.png",
    "failures.json",
    "summary.json",
    "report.txt",
}

# --------------------------------------------------------------------------- judging (pure)

EXPECTED = ("Prefers uv over pip for Python projects", "Uses Fedora on a ThinkPad")


def _item(item_id: str, content: str) -> dict[str, object]:
    return {"id": item_id, "content": content, "source": "memory", "relevance": 0.5}


def test_match_expected_exact_and_budget_cut() -> None:
    assert match_expected(EXPECTED[1], EXPECTED, set()) == 1
    cut = "Prefers uv over" + TRUNCATION_MARK
    assert match_expected(cut, EXPECTED, set()) == 0
    # Without the mark a prefix is a different text, not a cut one.
    assert match_expected("Prefers uv over", EXPECTED, set()) is None
    assert match_expected("Something else" + TRUNCATION_MARK, EXPECTED, set()) is None


def test_match_expected_prefers_unmatched_then_repeats() -> None:
    expected = ("Likes tea", "Likes tea in the morning")
    cut = "Likes tea" + TRUNCATION_MARK
    assert match_expected(cut, expected, {0}) == 1
    assert match_expected("Likes tea", expected, {0}) == 0  # a duplicate names the same text


def test_judge_ranks_expected_other_and_foreign() -> None:
    own_ids = {"a", "b", "c"}
    own_contents = {*EXPECTED, "Has a cat"}
    items = [_item("b", EXPECTED[1]), _item("c", "Has a cat"), _item("x", EXPECTED[0])]
    returned = judge(items, EXPECTED, own_ids, own_contents, foreign_contents=set())
    assert ranked_keys(returned) == ("e1", "other:c", "foreign:x")
    assert [r.foreign for r in returned] == [False, False, True]


def test_judge_flags_foreign_content_under_an_own_id() -> None:
    # Defence in depth: another user's text is a leak even if its id were somehow ours.
    returned = judge(
        [_item("a", "Other user's secret")], EXPECTED, {"a"}, set(EXPECTED), {"Other user's secret"}
    )
    assert returned[0].foreign
    # Content both users hold is fine when it comes under the user's own id.
    shared = judge([_item("a", EXPECTED[0])], EXPECTED, {"a"}, set(EXPECTED), {EXPECTED[0]})
    assert not shared[0].foreign and shared[0].match == 0


def test_recount_tokens_counts_each_content() -> None:
    returned = [Returned("a", text, "memory", 0.5, None, False) for text in EXPECTED]
    assert golden_run.recount_tokens(returned) == sum(count_tokens(t) for t in EXPECTED)


def test_load_golden_parses_every_case() -> None:
    dataset = golden_run.load_golden()
    raw = json.loads(golden_run.DEFAULT_PATH.read_text(encoding="utf-8"))
    assert len(dataset.cases) == len(raw["cases"])
    assert dataset.version == raw["version"]
    assert dataset.reference == datetime(2026, 11, 26, tzinfo=UTC)
    deleted = [m for c in dataset.cases for m in c.memories if m.deleted]
    expiring = [m for c in dataset.cases for m in c.memories if m.expires_at is not None]
    assert deleted and expiring
    assert all(m.expires_at is None or m.expires_at.tzinfo is not None for m in expiring)


def test_time_shift_moves_reference_to_now() -> None:
    reference = datetime(2026, 11, 26, tzinfo=UTC)
    now = datetime(2027, 3, 1, 12, tzinfo=UTC)
    assert reference + golden_run.time_shift(reference, now) == now


# --------------------------------------------------------------------------- CLI


@pytest.mark.parametrize(
    "argv",
    [
        ["--dataset", "memory", "--min-score", "0.2"],
        ["--dataset", "locomo"],
        ["--preset", "no-such-preset"],
        ["--path", "/nonexistent/golden.json"],
        ["--limit", "0"],
    ],
)
def test_bad_arguments_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2


def test_set_overrides_preset_fields_and_bad_ones_exit_2() -> None:
    from eval.runner import run_preset

    options = parse_args(
        ["--dataset", "memory", "--set", "cutoff_exempt_ranks=2", "--set", "time_boost=0"]
    )
    preset = run_preset(options, eval_settings(None))
    assert (preset.cutoff_exempt_ranks, preset.time_boost) == (2, 0.0)
    for bad in ("cutoff_exempt_ranks=two", "no_such_field=1"):
        with pytest.raises(SystemExit) as exc:
            parse_args(["--dataset", "memory", "--set", bad])
        assert exc.value.code == 2


def test_locomo_min_score_defaults_to_zero() -> None:
    options = parse_args(["--dataset", "locomo", "--path", str(golden_run.DEFAULT_PATH)])
    assert options.min_score == 0.0


# --------------------------------------------------------------------------- seeding


async def test_seeding_and_judging_on_the_real_service() -> None:
    """Setups stored as written (expired in the past, deleted soft-deleted); nothing stale or
    foreign comes back, even when asked with no relevance floor."""
    dataset = golden_run.load_golden()
    wanted = ("expired", "deleted", "security", "messages", "budget")
    cases = [next(c for c in dataset.cases if c.category == cat) for cat in wanted]
    shift = golden_run.time_shift(dataset.reference)
    now = datetime.now(UTC)
    async with running_service(eval_settings(None)) as harness:
        # The setup itself, read back through the repository.
        for case in cases[:2]:  # the expired and the deleted one
            user = f"seed-{uuid.uuid4().hex}"
            seeded = await golden_run.seed_user(
                harness, user, case.memories, case.messages, shift=shift, label=case.id
            )
            async with user_session(harness.resources.sessionmaker, user) as session:
                repo = MemoryRepository(session)
                for memory, item_id in zip(case.memories, seeded.memory_ids, strict=True):
                    row = await repo.get(user, uuid.UUID(item_id), include_deleted=True)
                    assert row is not None and row.content == memory.content
                    assert (row.deleted_at is not None) == memory.deleted, case.id
                    if memory.expires_at is not None:
                        assert row.expires_at == memory.expires_at + shift
                    if memory.created_at is not None:
                        assert row.created_at == memory.created_at + shift
            assert any(
                m.deleted or (m.expires_at and m.expires_at + shift < now) for m in case.memories
            ), case.id

        for case in cases:
            outcome = await golden_run.run_case(harness, case, shift=shift, token_budget=1000)
            assert outcome.result.error is None, case.id
            assert not outcome.result.cross_user_leak, case.id
            assert outcome.result.token_count <= 1000, case.id
            if case.category == "budget":
                # The case only tests packing if its memories cannot all fit.
                assert sum(count_tokens(m.content) for m in case.memories) > 1000, case.id
            stale = {m.content for m in case.memories if m.deleted}
            stale |= {
                m.content
                for m in case.memories
                if m.expires_at is not None and m.expires_at + shift <= now
            }
            body = await harness.query(
                outcome.user_id, case.query, min_score=0.0, limit=50, token_budget=20_000
            )
            contents = {item["content"] for item in body["items"]} | {
                r.content for r in outcome.returned
            }
            assert not contents & stale, case.id
            foreign = {m.content for o in case.other_users for m in [*o.memories, *o.messages]}
            own = {m.content for m in [*case.memories, *case.messages]}
            assert not contents & (foreign - own), case.id


# --------------------------------------------------------------------------- whole runs


@pytest.fixture(scope="module")
def mlflow_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One sqlite store for the module: creating MLflow's schema takes seconds."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow')}/mlflow.db"


def _run_id(printed: str) -> str:
    (line,) = [line for line in printed.splitlines() if line.startswith("mlflow run: ")]
    return line.removeprefix("mlflow run: ")


def test_cli_passes_on_first_cases_and_logs_to_mlflow(tmp_path: Path, mlflow_uri: str) -> None:
    """`python -m eval --dataset memory --limit 12`: exit 0, default out dir, env MLflow store."""
    from mlflow.tracking import MlflowClient

    uri = mlflow_uri
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "eval", "--dataset", "memory", "--limit", "12", "--no-progress"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verdict: PASS" in done.stdout
    assert "recall@5" in done.stdout and "exact_keyword" in done.stdout

    (out,) = (tmp_path / "eval" / "out").glob("memory-*")
    assert {p.name for p in out.iterdir()} >= ARTIFACTS
    with (out / "cases.csv").open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 12
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["passed"] is True and summary["overall"]["cases"] == 12

    client = MlflowClient(tracking_uri=uri)
    found = client.get_run(_run_id(done.stdout))
    assert client.get_experiment(found.info.experiment_id).name == "pgrecall-eval-memory"
    params, metrics = found.data.params, found.data.metrics
    assert found.info.status == "FINISHED"
    assert params["dataset"] == "memory" and params["dataset_version"] == "1.0.0"
    assert params["preset.name"] == "default" and params["preset.use_keyword"] == "True"
    assert {"preset.fusion", "preset.vector_floor", "preset.rrf_k"} <= set(params)
    assert params["token_budget"] == "1000" and params["min_relevance"] == "0.3"
    assert params["embedder_model"] and params["cases"] == "12"
    assert len(params["git_commit"]) == 40 or params["git_commit"] == "unknown"
    assert metrics["recall_at_5"] == pytest.approx(summary["overall"]["recall@5"])
    assert {"precision_at_5", "token_compliance", "cross_user_safety", "latency_p95_ms"} <= set(
        metrics
    )
    assert "cat_exact_keyword_recall_at_5" in metrics
    logged = {a.path for a in client.list_artifacts(found.info.run_id)}
    assert logged >= ARTIFACTS


async def test_broken_retrieval_fails_the_gate_with_a_breakdown(
    tmp_path: Path,
    mlflow_uri: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Vector arm only with a floor few texts reach: recall collapses, exit 1, cases listed."""
    from mlflow.tracking import MlflowClient

    broken = PRESETS["vector_only"].with_(
        name="broken_vector", vector_floor=0.9, vector_ceiling=0.95
    )
    monkeypatch.setitem(PRESETS, "broken_vector", broken)
    out = tmp_path / "out"
    options = parse_args([
        "--dataset", "memory", "--limit", "12", "--preset", "broken_vector", "--out", str(out),
        "--tracking-uri", mlflow_uri, "--no-progress",
    ])  # fmt: skip
    code = await run(options, eval_settings(options.preset))
    printed = capsys.readouterr().out

    assert code == 1
    assert "verdict: FAIL" in printed and "FAIL: blocking threshold(s) missed: recall@5" in printed
    assert "Failing cases (" in printed
    assert "[exact_keyword] recall-exact-001" in printed and "missing:" in printed
    failures = json.loads((out / "failures.json").read_text(encoding="utf-8"))
    assert failures and all(f["missing_expected"] for f in failures)
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["passed"] is False

    found = MlflowClient(tracking_uri=mlflow_uri).get_run(_run_id(printed))
    assert found.info.status == "FINISHED"
    assert found.data.params["preset.name"] == "broken_vector"
    assert found.data.params["preset.vector_floor"] == "0.9"
    assert found.data.metrics["recall_at_5"] < 0.8


def _pid_alive(pid: int) -> bool:
    """True for a running process; a zombie waiting for its reaper has exited, so counts as gone."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def _start_eval(tmp_path: Path, name: str) -> tuple[subprocess.Popen[str], Path]:
    temp = tmp_path / name
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "eval",
            "--dataset",
            "memory",
            "--no-mlflow",
            "--no-progress",
            "--out",
            str(temp / "out"),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A background child may inherit "ignore SIGINT"; a terminal's Ctrl-C would not.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    return process, temp


def _ready_postmaster(temp: Path) -> int | None:
    """The server's pid once it accepts connections, else None.

    postmaster.pid is written in steps, and initdb's single-user backend writes one too; only
    the real server ends it with the status line "ready".
    """
    for found in temp.glob("pgrecall-eval-*/pg/postmaster.pid"):
        try:
            lines = found.read_text().splitlines()
        except FileNotFoundError:
            return None
        if len(lines) >= 8 and lines[7].strip() == "ready" and lines[0].isdigit():
            return int(lines[0])
    return None


def test_interrupted_runs_stop_and_remove_their_database(tmp_path: Path) -> None:
    """Ctrl-C or SIGTERM mid-run: a distinct exit code, no server or data dir left behind.
    TMPDIR is the test's tmp_path, too long for a socket path under pytest-xdist (a directory
    per worker): the database puts its socket in /tmp (EmbeddedPostgres.socket_dir)."""
    runs = {
        signal.SIGINT: (130, *_start_eval(tmp_path, "int")),
        signal.SIGTERM: (143, *_start_eval(tmp_path, "term")),
    }  # both at once: each mostly waits on imports and the database start
    try:
        postmasters: dict[signal.Signals, int] = {}
        deadline = time.monotonic() + 90
        while len(postmasters) < len(runs) and time.monotonic() < deadline:
            time.sleep(0.2)
            for sig, (_, process, temp) in runs.items():
                if sig not in postmasters and process.poll() is None:
                    pid = _ready_postmaster(temp)
                    if pid is not None:
                        postmasters[sig] = pid
        ended = [p.communicate()[1][-2000:] for _, p, _ in runs.values() if p.poll() is not None]
        assert len(postmasters) == len(runs), f"a run never started its database: {ended}"
        time.sleep(1.0)  # into the run
        for sig, (_, process, _) in runs.items():
            process.send_signal(sig)
        for sig, (code, process, temp) in runs.items():
            _, err = process.communicate(timeout=120)
            assert process.returncode == code, err
            assert not list(temp.glob("pgrecall-eval-*")), f"{sig.name}: data dir left behind"
            assert not _pid_alive(postmasters[sig]), f"{sig.name}: server left running"
    finally:
        for _, process, _ in runs.values():
            if process.poll() is None:
                process.kill()
            process.communicate()  # reaps the child and closes its pipes


def _locomo_file(path: Path) -> Path:
    turns1 = [
        ("Ana", "D1:1", "I just adopted a greyhound called Pixel from the rescue centre."),
        ("Ben", "D1:2", "Congratulations! How is she settling in?"),
        ("Ana", "D1:3", "Pixel sleeps all day on the sofa and runs like mad in the park."),
    ]
    turns2 = [
        ("Ben", "D2:1", "I started learning the cello last month, my teacher is strict."),
        ("Ana", "D2:2", "Cello is beautiful. Which piece are you practising?"),
        ("Ben", "D2:3", "Bach's first cello suite, the prelude, very slowly."),
    ]
    sample = {
        "sample_id": "tiny-1",
        "conversation": {
            "speaker_a": "Ana", "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [{"speaker": s, "dia_id": d, "text": t} for s, d, t in turns1],
            "session_2_date_time": "10:04 am on 19 June, 2023",
            "session_2": [{"speaker": s, "dia_id": d, "text": t} for s, d, t in turns2],
        },
        "qa": [
            {"question": "What kind of dog did Ana adopt?", "answer": "a greyhound",
             "evidence": ["D1:1"], "category": 4},
            {"question": "Which piece is Ben practising on the cello?", "answer": "Bach",
             "evidence": ["D2:3"], "category": 4},
            {"question": "What instrument does Ben play and who adopted Pixel?", "answer": "-",
             "evidence": ["D2:1", "D1:1"], "category": 1},
            {"question": "Did Ben adopt a cat?", "adversarial_answer": "yes",
             "evidence": ["D1:1"], "category": 5},
        ],
    }  # fmt: skip
    path.write_text(json.dumps([sample]), encoding="utf-8")
    return path


async def test_locomo_reports_without_gating(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """LoCoMo runs report per category and the README references, and always exit 0."""
    out = tmp_path / "out"
    options = parse_args([
        "--dataset", "locomo", "--path", str(_locomo_file(tmp_path / "tiny.json")),
        "--out", str(out), "--no-mlflow", "--no-progress",
    ])  # fmt: skip
    assert options.min_score == 0.0
    code = await run(options, eval_settings(None))
    printed = capsys.readouterr().out

    assert code == 0
    assert "single-hop" in printed and "multi-hop" in printed
    assert "BM25" in printed and "0.509" in printed
    assert "(none checked)" in printed
    with (out / "cases.csv").open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 3  # category 5 (adversarial) is skipped
    assert {p.name for p in out.iterdir()} >= ARTIFACTS
    # Unambiguous questions over six turns: the evidence turn is ranked first.
    first = next(r for r in rows if r["case_id"] == "tiny-1-q0")
    assert json.loads(first["ranked"])[0] == "D1:1"


def test_samples_pick_conversations_and_unknown_ones_are_refused(tmp_path: Path) -> None:
    path = _locomo_file(tmp_path / "tiny.json")
    options = parse_args(["--dataset", "locomo", "--path", str(path), "--samples", "tiny-1"])
    assert options.samples == ("tiny-1",)
    with pytest.raises(SystemExit) as refused:
        parse_args(["--dataset", "locomo", "--path", str(path), "--samples", "tiny-2"])
    assert refused.value.code == 2
    with pytest.raises(SystemExit):
        parse_args(["--dataset", "memory", "--samples", "tiny-1"])
    conversations = locomo_run.load(path)
    assert [c.sample_id for c in _only_samples(conversations, ["tiny-1"])] == ["tiny-1"]
    assert _only_samples(conversations, []) == conversations
