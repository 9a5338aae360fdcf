"""Entry points: argument parsing for run_inference.py (run), compute_budget.py (budget) and
export_training.py (export); each builds a config, calls a job and maps errors to exit codes."""
