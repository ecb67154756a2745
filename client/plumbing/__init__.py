"""Plumbing the client, the authority and the standalone witness share, and nothing of
deplog's model: files never seen half-written and directory locks (``files``), the
connection protocol SQL shared between databases is written against (``dbapi``), why a
database cannot be opened (``storage_faults``), progress for a person watching
(``progress``), a wait a cancellation always ends (``waiting``), and the URL and port
checks of every command line (``arguments``)."""
