"""`python -m eval --dataset memory|locomo`: see eval.runner."""

from eval.runner import main

raise SystemExit(main())
