# The whole developer interface. `make serve` and `make test` need nothing installed first.
.PHONY: serve test eval eval-locomo bench lint venv install-cli

venv:
	@scripts/bootstrap.sh

serve: venv
	.venv/bin/pgrecall serve

# Put `pgrecall` on PATH for this user (MCP clients start it by name): a link in BINDIR
# (~/.local/bin by default, on PATH in most login shells) to the console script in .venv/bin.
BINDIR ?= $(HOME)/.local/bin
install-cli: venv
	@mkdir -p "$(BINDIR)"
	@ln -sfn "$(CURDIR)/.venv/bin/pgrecall" "$(BINDIR)/pgrecall"
	@echo "$(BINDIR)/pgrecall -> $(CURDIR)/.venv/bin/pgrecall"
	@case ":$$PATH:" in *":$(BINDIR):"*) ;; *) echo "note: $(BINDIR) is not on PATH";; esac

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
