"""Throwaway real servers for tests and benchmarks (loopback only, temp folders)."""
