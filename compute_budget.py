#!/usr/bin/env python3
"""Turn per-dataset output-token budgets into sample counts for run_inference.py (see --help)."""

import sys

if __name__ == "__main__":
    try:
        from synthgen.cli.budget import main  # seconds of imports: Ctrl-C may come now
    except KeyboardInterrupt:
        print("compute_budget.py: interrupted", file=sys.stderr)
        sys.exit(130)
    except ModuleNotFoundError as exc:  # run outside the environment the README sets up
        from synthgen import missing_requirement

        missing_requirement("compute_budget.py", exc)
    sys.exit(main())
