"""`python -m app.cli` runs the `pgrecall` command (the tests and the bench start it this way)."""

from app.cli import main

main()
