"""Crashes, faults, hostile input and settings, secrets: what must hold when things go wrong."""
