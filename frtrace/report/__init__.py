"""Reporters: a Report in, text out. Pure and deterministic (no times, no absolute paths)."""
