"""synthgen: turn large prompt sets into training data through an SGLang server.

Modules, one job each:
    config      the one validated RunConfig object
    errors      the exception tree and the exit codes it maps to
    prompts     finding datasets and reading/normalising their prompt lines (streamed)
    selection   which prompts a run takes: caps, first/random sampling (pure)
    templating  tokenizer loading and chat-template rendering (the only transformers import)
    client      the SGLang HTTP client: payloads, responses, error classification
    reasoning   splitting model output into reasoning and answer (pure)
    store       result files: resume scan, torn-line repair, whole-line appends, run lock
    runner      the asyncio scheduler: bounded in-flight pool, retries, outages, signals
    progress    progress bar / status lines / log file, and the end-of-run summary
    budget      token budgets turned into per-dataset sample counts (pure)
    cli, budget_cli   argument parsing for the two entry scripts
"""

__version__ = "0.1.0"
