"""Stigma probes: Social Distance Scale (Mei et al. 2023) and AQ-27 (Mina et al. 2024) on causal
LLMs, masked LMs and sentiment classifiers; statistics and before/after tables."""

from scd.eval.stigma.evaluate import PROBES, evaluate_stigma
from scd.eval.stigma.report import stigma_table, stigma_table_data

__all__ = ["PROBES", "evaluate_stigma", "stigma_table", "stigma_table_data"]
