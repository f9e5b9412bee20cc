"""Chapters 1-2: Theorem 1's quantities and its study (sweeps, certificate, figures)."""
