"""The SGLang server: the HTTP client, what a server serves and whether it is up, and starting,
watching and stopping one (--launch-server, the CPU demo server)."""
