"""The SCD paper's vocabulary (Raj et al. 2024) in one place: contact principles, scenarios,
actions, contact types and prompt scales, in the paper's order, with their display labels.

The prompt generator (``scd.data_gen.templates``), the metrics, the tables and the figures read
these; the prompt text itself lives in ``scd/data_gen/data/*.yaml``.
"""

from __future__ import annotations

__all__ = [
    "ACTIONS", "CONTACTS", "CONTACT_LABELS", "PRINCIPLES", "SCALES", "SCENARIOS",
    "SCENARIO_TABLE_ORDER",
]  # fmt: skip

PRINCIPLES = (
    "equal_status",
    "common_goals",
    "intergroup_cooperation",
    "support_of_authorities",
    "extended_contact",
    "virtual_contact",
)
SCENARIOS = ("education", "workplace", "sports", "community", "healthcare")  # as generated
SCENARIO_TABLE_ORDER = tuple(sorted(SCENARIOS))  # the columns of Tables 3-8
ACTIONS = ("positive", "negative")
CONTACTS = ("none", "positive", "negative")
CONTACT_LABELS = {
    "none": "No contact",
    "positive": "Positive contact",
    "negative": "Negative contact",
}
SCALES = ("certainty", "likelihood", "frequency")
