"""synthgen: turn large prompt sets into training data through an SGLang server.

Modules, one job each:
    config         the one validated RunConfig object
    errors         the exception tree, the exit codes it maps to, the entry scripts' error path
    prompts        finding datasets and turning their lines into prompts (streamed, per --regenerate mode)
    conversations  one input record as a conversation: tools, tool calls, regeneration prompts (pure)
    selection      which prompts a run takes: caps, first/random sampling (pure)
    templating     tokenizer loading and chat-template rendering (the only transformers import)
    parsers        SGLang's reasoning and tool-call parsers, by SGLang's names (pure); reasoning: the <think> rule
    records        the row formats: result rows, turns, error rows, what resume reads
    dataset_run    one dataset's run: its store, resume state, counts and token-budget gate
    prepare        one request: read, render, tokenize and fit a prompt (or the next turn of a conversation)
    server         what the server serves and accepts, and whether it is up
    client         the SGLang HTTP client: payloads, answers, error classification
    concurrency    --concurrency auto: load reports, the controller, the adjustable in-flight limit
    model          the tokenizer, chat template and parsers a run uses, and the settings they amount to
    runner         the asyncio scheduler: in-flight pool, retries, outages, signals, exit code
    supervisor, launcher, demo   --launch-server: start, watch and stop the server; the CPU demo server
    store, openfiles   result files: resume scan, torn-line repair, whole-line appends, locks, descriptors
    provenance     the settings that shaped a dataset's rows (settings.jsonl)
    progress       progress bar / status lines / log file, and the end-of-run summary
    budget, budget_file   token budgets turned into per-dataset sample counts (pure); budget.json
    export, histogram     export_training.py: rows to SpecForge / token / messages files, the report
    cli, budget_cli, export_cli   argument parsing for the three entry scripts
"""

__version__ = "0.2.0"
