"""--launch-server: the server a run starts, watches, restarts and stops (launcher, supervisor, watch),
what it launched (record: launched_server.json, trusted only for the very process), its bounded log
(serverlog, logpump) and processes as /proc shows them (procs)."""
