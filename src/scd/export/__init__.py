"""Exports of scd's benchmarks to other tools: an lm-evaluation-harness task directory."""
