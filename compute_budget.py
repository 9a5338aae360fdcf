#!/usr/bin/env python3
"""Turn per-dataset output-token budgets into sample counts for run_inference.py (see --help)."""

import sys

from synthgen.budget_cli import main

if __name__ == "__main__":
    sys.exit(main())
