"""The ``deplog`` command line: thin over the library."""
