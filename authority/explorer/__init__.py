"""The explorer: server-rendered pages over the log, with proofs checked in the reader's browser."""
