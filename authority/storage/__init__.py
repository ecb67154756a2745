"""The log's storage: the SQLite schema, the stored hash tree, the read side and the
offline storage audit."""
