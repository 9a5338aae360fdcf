"""One run of run_inference.py: plan, prepare, send, record; concurrency and progress."""
