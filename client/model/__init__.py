"""The deplog data model: canonical JSON, SemVer, notices, log entries, and the pure folds
over a log prefix (the publisher registry, admission rules, tool status)."""
