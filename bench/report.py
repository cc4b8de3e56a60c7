"""Results on disk: one JSON per store size, a plot of latency vs store size, a text table."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

_RESULT = re.compile(r"^results-(\d+)\.json$")


def result_path(out_dir: Path, items: int, tag: str | None = None) -> Path:
    """bench/out/results-<items>.json; tuning runs add a tag so they never replace the baseline."""
    return out_dir / (f"results-{items}-{tag}.json" if tag else f"results-{items}.json")


def write_result(path: Path, result: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1, sort_keys=False) + "\n")


def load_baselines(out_dir: Path) -> list[dict[str, Any]]:
    """Untagged results, smallest store first."""
    found = []
    for path in out_dir.glob("results-*.json"):
        if _RESULT.match(path.name):
            found.append(json.loads(path.read_text()))
    return sorted(found, key=lambda r: r["store"]["items"])


def plot(results: list[dict[str, Any]], path: Path) -> Path | None:
    """p50/p95/p99 at each concurrency vs store size (log x), one panel per concurrency."""
    if not results:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = sorted({lvl["concurrency"] for r in results for lvl in r["levels"]})
    fig, axes = plt.subplots(1, len(levels), figsize=(4.5 * len(levels), 4), squeeze=False)
    for ax, concurrency in zip(axes[0], levels, strict=True):
        sizes, series = [], {"p50": [], "p95": [], "p99": []}
        for r in results:
            level = next((lvl for lvl in r["levels"] if lvl["concurrency"] == concurrency), None)
            if level is None or level["latency_ms"].get("n", 0) == 0:
                continue
            sizes.append(r["store"]["items"])
            for key in series:
                series[key].append(level["latency_ms"][key])
        for key, values in series.items():
            ax.plot(sizes, values, marker="o", label=key)
        for kind, style in (("small", "--"), ("big", ":")):
            values = [
                lvl[f"{kind}_user_latency_ms"].get("p95")
                for r in results
                for lvl in r["levels"]
                if lvl["concurrency"] == concurrency and lvl["latency_ms"].get("n", 0)
            ]
            if len(values) == len(sizes) and None not in values:
                ax.plot(sizes, values, linestyle=style, color="grey", label=f"p95 {kind} users")
        ax.set_xscale("log")
        ax.set_xlabel("memory items in the store")
        ax.set_ylabel("query_memory latency (ms)")
        ax.set_title(f"concurrency {concurrency}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle("pgrecall query_memory end-to-end latency (local embedder, 2 cores)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def table(results: list[dict[str, Any]]) -> str:
    """Markdown rows: size x concurrency with latency, throughput, CPU, recall, short sets, RSS."""
    lines = [
        "| items | conc | p50 ms | p95 ms | p99 ms | small p95 | big p95 | req/s | CPU ms/req "
        "| recall@10 | short | RSS MB | load |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        recall = r["recall"]
        for lvl in r["levels"]:
            lat = lvl["latency_ms"]
            cpu = lvl.get("cpu_ms_per_request", {}).get("total", "-")
            lines.append(
                f"| {r['store']['items']:,} | {lvl['concurrency']} | {lat.get('p50', '-')} | "
                f"{lat.get('p95', '-')} | {lat.get('p99', '-')} | "
                f"{lvl['small_user_latency_ms'].get('p95', '-')} | "
                f"{lvl['big_user_latency_ms'].get('p95', '-')} | {lvl['throughput_rps']} | {cpu} | "
                f"{recall['recall_at_10']} | {recall['short_result_sets']} | "
                f"{lvl['rss_mb_peak']} | {lvl.get('loadavg_1m_before', '-')} |"
            )
    return "\n".join(lines)
