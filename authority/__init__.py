"""deplog authority: the log service, its storage, sequencer and CLI. Builds on ``client``."""
