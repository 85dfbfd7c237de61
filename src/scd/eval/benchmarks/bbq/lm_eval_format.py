"""BBQ as lm-evaluation-harness 0.4.13's ``bbq_multiple_choice`` puts it (``scd eval bbq --format
lm-eval``), so that a number can be compared with a published lm-eval one: its prompt
``"{context}\\n\\nQ: {question}\\nA:"``, its twelve choices (the two people, then the ten "unknown"
phrasings HELM lists, the item's own one among them), the choice of highest summed
log-probability of ``" " + choice`` after the prompt, and its metrics -- computed by lm-eval's own
``bbq`` code (``lm_eval.tasks.bbq.utils``: which answers are biased, ``acc``, ``accuracy_amb``,
``accuracy_disamb``, ``amb_bias_score``, ``disamb_bias_score``), which this format needs installed
(``pip install 'scd[lm-eval]'``).

lm-eval reads the prompt as plain text (its ``--apply_chat_template`` off); ``--no-chat-template``
does the same here, and is what reproduces lm-eval's numbers. The pick is also mapped onto BBQ's
three answers (an "unknown" phrasing is the item's unknown answer), so that scd's own accuracies
and bias scores (Parrish et al.) sit beside lm-eval's.
"""

from __future__ import annotations

from typing import Any

from scd.errors import InputError

__all__ = ["LM_EVAL_METRICS", "lm_eval_metrics", "lm_eval_utils", "prompt", "score_items"]

LM_EVAL_METRICS = ("acc", "accuracy_amb", "accuracy_disamb", "amb_bias_score", "disamb_bias_score")


def lm_eval_utils() -> Any:
    """lm-evaluation-harness's own BBQ code.

    Raises:
        InputError: lm-eval is not installed.
    """
    try:
        from lm_eval.tasks.bbq import utils
    except ImportError:
        raise InputError(
            "scores with lm-evaluation-harness's own BBQ code: pip install 'scd[lm-eval]'",
            key="format",
            value="lm-eval",
        ) from None
    return utils


def prompt(item: dict[str, Any]) -> str:
    """lm-eval's ``doc_to_text`` of ``bbq_multiple_choice``."""
    return f"{item['context']}\n\nQ: {item['question']}\nA:"


def _docs(items: list[dict[str, Any]], utils: Any) -> list[dict[str, Any]]:
    """The items as lm-eval's ``process_docs`` leaves them (its biased answers added)."""
    import datasets

    fields = (
        "context_condition",
        "question_polarity",
        "category",
        "answer_info",
        "additional_metadata",
        "context",
        "question",
        "ans0",
        "ans1",
        "ans2",
        "label",
    )
    table = datasets.Dataset.from_list([{k: item[k] for k in fields} for item in items])
    shown = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        return list(utils.process_docs(table))
    finally:
        if shown:
            datasets.enable_progress_bars()


def _request(fmt: Any, text: str, choices: list[str], chat_template: bool) -> tuple:
    """Token ids of the prompt and of each choice after it: lm-eval's way without the chat
    template (the prompt, then ``" " + choice`` split off the whole text's tokens), the
    template's reply otherwise."""
    if chat_template:
        return tuple(fmt.encode([text])[0]), fmt.option_ids(tuple(choices))
    tok = fmt.tokenizer
    context = tok(text)["input_ids"]
    options = tuple(tuple(tok(f"{text} {c}")["input_ids"][len(context) :]) for c in choices)
    return tuple(context), options


def score_items(
    engine: Any, fmt: Any, items: list[dict[str, Any]], chat_template: bool
) -> list[dict[str, Any]]:
    """Score ``items`` lm-eval's way; each record is scd's BBQ record (the pick mapped onto the
    item's three answers, :func:`scd.eval.benchmarks.bbq.metrics.record`) with ``lm_eval``:
    the twelve choices' log-probs, the pick among them and lm-eval's per-item metric values."""
    from scd.eval.benchmarks.bbq.metrics import record
    from scd.eval.engines import ChoiceRequest

    utils = lm_eval_utils()
    docs = _docs(items, utils)
    requests = []
    for doc in docs:
        ids, options = _request(fmt, prompt(doc), utils.doc_to_choice(doc), chat_template)
        requests.append(ChoiceRequest(ids, options))
    out = []
    for item, doc, req, lls in zip(items, docs, requests, engine.score(requests)):
        choices = utils.doc_to_choice(doc)
        pick = max(range(len(lls)), key=lambda i: lls[i])  # numpy's argmax: the first on a tie
        named = [item["ans0"], item["ans1"], item["ans2"]]
        unknown = next(i for i, a in enumerate(named) if a not in choices[:2])
        at = [choices.index(a) if i != unknown else None for i, a in enumerate(named)]
        best = 2 + max(range(len(lls) - 2), key=lambda i: lls[2 + i])  # the likeliest "unknown"
        at[unknown] = best
        rec = record(item, [lls[i] for i in at], [len(req.option_ids[i]) for i in at])
        metrics = utils._process_results(doc, pick)
        rec["lm_eval"] = {
            "choices": choices,
            "logprobs": [float(x) for x in lls],
            "pick": pick,
            "acc": metrics["acc"],
            "n_biased": metrics["disamb_bias_score"][1],
            "n_non_unk": metrics["disamb_bias_score"][2],
            "disambiguated": bool(metrics["disamb_bias_score"][3]),
        }
        out.append(rec)
    return out


def lm_eval_metrics(records: list[dict[str, Any]]) -> dict[str, float]:
    """lm-eval's aggregates of the records (its own ``agg_*`` functions): ``acc``,
    ``accuracy_amb``, ``accuracy_disamb``, ``amb_bias_score``, ``disamb_bias_score``."""
    import numpy as np

    utils = lm_eval_utils()
    rows = [r["lm_eval"] for r in records]
    pairs = [(r["acc"], r["disambiguated"]) for r in rows]
    quads = [(r["acc"], r["n_biased"], r["n_non_unk"], r["disambiguated"]) for r in rows]
    values = {
        "acc": float(np.mean([r["acc"] for r in rows])),
        "accuracy_amb": utils.agg_accuracy_amb(pairs),
        "accuracy_disamb": utils.agg_accuracy_disamb(pairs),
        "amb_bias_score": utils.agg_amb_bias_scores(quads),
        "disamb_bias_score": utils.agg_disamb_bias_scores(quads),
    }
    return {k: None if v is None or not np.isfinite(v) else float(v) for k, v in values.items()}
