"""HTTP: the authority's API handlers, and the plumbing, metrics, push stream and rate
limits it shares with the witness server."""
