"""compute_budget.py's job: token budgets to per-dataset sample counts, and budget.json."""
