"""The log's storage: the ``Database`` interface and its backends (SQLite, PostgreSQL),
the queries they share (the stored hash tree, the indexes, the read side), the storage
errors, the offline audit and copy, and the coordination of processes sharing a log."""
