"""synthgen: turn large prompt sets into training data through an SGLang server.

Folders, top to bottom (a module imports only from the layers below its own; the contract is in
pyproject.toml and `lint-imports` checks it):

    cli/      the three entry scripts' argument parsing: run.py, budget.py, export.py
    run/      one run: runner (plan, pool, signals), prepare (one request), dataset_run (one dataset's
              store, counts and budget gate), concurrency (--concurrency auto), model, progress
    export/   export_training.py: rows to SpecForge / token / messages files, the report
    budget/   compute_budget.py: token budgets to sample counts (plan.py, pure), budget.json (file.py)
    launch/   --launch-server: launcher, supervisor, watch, record (launched_server.json), procs,
              serverlog and logpump (server.log bounded, keys masked)
    demo/     the CPU demo server: install, commands, model (the build script), bpe
    server/   the SGLang server as the run talks to it: HTTP client, discovery and health
    config.py the one validated RunConfig
    chat/     chat templates (templating, the only transformers import) and SGLang's reasoning and
              tool-call parsers by SGLang's names (parsers)
    data/     files and rows: prompts, conversations, selection, records, store, openfiles, provenance
    errors.py, fmt.py   the exception tree and exit codes; durations as printed
"""

__version__ = "0.2.0"


def missing_requirement(script: str, exc: ModuleNotFoundError) -> None:
    """An entry script's imports failed: a package of requirements.txt missing (the script run by a Python
    outside the environment the README sets up) is one line with the fix and exit 2; anything else is raised."""
    if exc.name is None or exc.name.split(".")[0] == "synthgen":
        raise exc
    import sys

    print(
        f"{script}: the Python package {exc.name!r} is missing: run it in the environment the README sets up "
        "(python3 -m venv .venv && . .venv/bin/activate && pip install -r requirements.txt)",
        file=sys.stderr,
    )
    sys.exit(2)
