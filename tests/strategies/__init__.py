"""Tests of the compaction strategies, one file per strategy and one for their shared cut rules."""
