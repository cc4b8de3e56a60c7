"""Thin entry for `make bench`: the benchmark lives in eval/bench (python -m eval.bench)."""

from eval.bench.__main__ import cli

if __name__ == "__main__":
    cli()
