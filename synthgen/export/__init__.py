"""export_training.py's job: result rows to training files and the report on them."""
