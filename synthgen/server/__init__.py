"""The SGLang server as the run talks to it: the HTTP client (client) and what a server serves and
whether it is up (discovery). Launching one is synthgen.launch's; the demo server synthgen.demo's."""
