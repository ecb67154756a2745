"""C2SP and RFC 9162, nothing else: signed notes, checkpoints, cosignatures, proofs,
receipts, trust policies, key files and fork evidence. Knows nothing of deplog's model, so
any transparency-log client can reuse it."""
