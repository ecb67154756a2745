"""The cache side: the guard that decides whether a cached tool may be served, a guarded
cache, MCP tool-list filtering and inventory reports."""
