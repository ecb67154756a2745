"""deplog client: wire formats and every verifier. Depends on nothing in ``authority``."""
