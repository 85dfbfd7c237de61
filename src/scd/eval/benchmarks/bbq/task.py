"""BBQ items put to a causal LM (:class:`BBQTask`): each item's three answer texts scored as the
assistant's reply (choice mode), or the letter of its answer generated and parsed (generate mode),
under each of ``permute_options`` answer orders; lm-evaluation-harness's format scored by
:mod:`~scd.eval.benchmarks.bbq.lm_eval_format`. The records summarised and rendered as Table 15
(:mod:`~scd.eval.benchmarks.bbq.metrics`).
"""

from __future__ import annotations

from typing import Any

from scd.eval.engines import ChoiceRequest
from scd.eval.tasks import CausalTask

__all__ = ["BBQTask"]


class BBQTask(CausalTask):
    """BBQ items put to a causal LM: the answer text with the highest summed log-probability."""

    name = "scd eval bbq"
    unit = "item"

    def score(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        import numpy as np

        from scd.eval.benchmarks.bbq.data import answer_orders, parse_letter, prompt_text

        if self.config.get("format") == "lm-eval":
            from scd.eval.benchmarks.bbq.lm_eval_format import score_items

            chat = self.config.get("chat_template", True)
            return score_items(self.engine, self.fmt, rows, chat)
        from scd.eval.benchmarks.bbq.metrics import generated_record, record

        orders = answer_orders(self.config.get("permute_options", 1))
        generate = self.config.get("mode") == "generate"
        listed = [  # every row under each order (one engine call: one progress line)
            {**r, **{f"ans{j}": r[f"ans{k}"] for j, k in enumerate(order)}}
            for order in orders
            for r in rows
        ]
        users = [prompt_text(r, lettered=generate) for r in listed]
        ids = self.fmt.encode(users)
        if generate:
            chats = [self.fmt.conversation(u) for u in users]  # what a chat API is sent
            texts = self.engine.generate(ids, self.config["max_new_tokens"], messages=chats)
            picks = [
                parse_letter(t, [r[f"ans{k}"] for k in range(3)]) for t, r in zip(texts, listed)
            ]
            # back to BBQ's own answer order
            picks = [
                None if p is None else o[p]
                for p, o in zip(picks, (o for o in orders for _ in rows))
            ]
            per_order = [picks[i * len(rows) : (i + 1) * len(rows)] for i in range(len(orders))]
            records = [generated_record(r, p, t) for r, p, t in zip(rows, per_order[0], texts)]
        else:
            # one option text at a time: "Can't be determined" and the like recur, so the cache hits
            opts = [tuple(self.fmt.option_ids((r[f"ans{k}"],))[0] for k in range(3)) for r in rows]
            flat = self.engine.score(
                [ChoiceRequest(tuple(p), o) for p, o in zip(ids, opts * len(orders))]
            )
            # per order, per row: the scores of ans0, ans1, ans2 (the texts in BBQ's order)
            scores = [flat[i * len(rows) : (i + 1) * len(rows)] for i in range(len(orders))]
            records = [record(r, s, [len(x) for x in o]) for r, s, o in zip(rows, scores[0], opts)]
            per_order = [[int(np.argmax(x)) for x in s] for s in scores]
        if len(orders) > 1:
            for i, rec in enumerate(records):
                rec["order_preds"] = [p[i] for p in per_order]
        return records

    def summarize(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        from scd.eval.benchmarks.bbq.metrics import (
            bbq_metrics,
            generation_rates,
            order_consistency,
        )

        summary = bbq_metrics(records)
        if "lm_eval" in records[0]:
            from scd.eval.benchmarks.bbq.lm_eval_format import lm_eval_metrics

            summary["lm_eval"] = lm_eval_metrics(records)
        if "order_preds" in records[0]:
            summary["answer_orders"] = order_consistency(records, self.config["permute_options"])
        if "generated" in records[0]:
            summary["generation"] = generation_rates(records)
        summary["counts"] = {
            c: sum(r["category"] == c for r in records) for c in summary["by_category"]
        }
        return summary

    def render(self, summary: dict[str, Any]) -> dict[str, str]:
        from scd.eval.benchmarks.bbq.metrics import (
            generation_lines,
            markdown,
            order_lines,
            table15_rows,
        )
        from scd.eval.benchmarks.tables import evaluated

        text = markdown(table15_rows({evaluated(summary): summary}))
        if "lm_eval" in summary:
            values = ", ".join(
                f"{k} {v:.4f}" if v is not None else f"{k} –" for k, v in summary["lm_eval"].items()
            )
            text += (
                f"\nlm-evaluation-harness 0.4.13's bbq_multiple_choice, its own metrics: {values}\n"
            )
        if "generation" in summary:
            text += "\n" + "\n".join(generation_lines(summary["generation"]))
        if "answer_orders" in summary:
            text += "\n" + "\n".join(order_lines(summary["answer_orders"]))
        return {"tables.md": text}
