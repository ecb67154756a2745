"""The verifiable tool-status map (``deplog-map/v1``), one concern per module.

``docs/fold-spec.md`` is the normative text and these modules its executable form (no
other implementation runs); ``docs/architecture.md`` ("The tool-status map") says which
module holds what, and how the stored map works.
"""
