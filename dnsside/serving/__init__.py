"""The serving side: the process's life (app), UDP and TCP (server, mmsg), HTTP, and the
log lines and metrics of what the index learnt (reporting). It imports the core, the
sources and the metrics, never the operations wing."""
