"""A standalone C2SP tlog-witness: the compare-and-swap core, its HTTP server and the
``witness`` command. Imports only the base errors, ``client.tlog`` and the shared HTTP
plumbing, so it can be read, tested and deployed on its own."""
