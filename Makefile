# The whole developer interface. `make serve` and `make test` need nothing installed first.
.PHONY: serve test eval eval-locomo bench lint venv

venv:
	@scripts/bootstrap.sh

serve: venv
	.venv/bin/pgrecall serve

test: venv
	@scripts/ensure-test-deps.sh
	.venv/bin/python -m pytest

eval: venv
	.venv/bin/python -m eval --dataset memory

eval-locomo: venv
	.venv/bin/python -m eval --dataset locomo --path ../shared/datasets/locomo/locomo-dev.json

bench: venv
	.venv/bin/python scripts/bench.py

lint: venv
	.venv/bin/ruff check .
	.venv/bin/lint-imports
