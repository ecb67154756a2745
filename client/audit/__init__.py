"""Offline auditing: verify checkpoints, receipts, consistency and whole-log replays from
files, and the export that writes those files."""
