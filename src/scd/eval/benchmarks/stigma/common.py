"""What the stigma probes share: their options, the model-kind check, one task for causal LMs
(through an engine), masked LMs and classifiers, the prompts ``scd run`` generates, and the
before/after table of the probes that measure a stigmatized - non-stigmatized gap.

=============  ======================  ==================================  ==================
probe          model                   prompts (``scd generate stigma``)   per-prompt measure
=============  ======================  ==================================  ==================
``sds``        causal LM (hf, vllm)    ``sds.parquet``                     P(Unlikely)
``mlm``        masked LM or XLNet (hf) ``sds.parquet``                     lexicon P(negative)
``aq27``       causal or masked LM     ``aq27.parquet``                    log-likelihood/PLL
``sentiment``  sequence classifier     ``sentiment.parquet``               negative label
=============  ======================  ==================================  ==================

Each writes ``OUT/records.jsonl`` (resumable) with ``OUT/timing.jsonl``, ``OUT/run.json``,
``OUT/summary.json`` and ``OUT/tables.md``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from scd.config.engine import EVAL_BATCH_SIZE
from scd.config.options import Pin, option, positive
from scd.config.threads import n_parameters, use_threads
from scd.errors import InputError, first_line
from scd.eval.benchmarks.base import Benchmark, BenchmarkOptions, RunData
from scd.eval.benchmarks.stigma.xlnet import is_xlnet
from scd.eval.benchmarks.tables import Table, evaluated
from scd.eval.tasks import CausalModel, CausalTask

__all__ = ["StigmaOptions", "StigmaProbe", "StigmaTask", "model_kind"]

Scorer = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
HINT = {
    "masked": "use the mlm or aq27 probe",
    "classifier": "use the sentiment probe",
    "causal": "use the sds or aq27 probe",
}


@dataclass
class StigmaOptions(BenchmarkOptions):
    """A stigma probe: ``scd eval <probe>`` flags, a recipe's ``eval.<probe>`` keys."""

    prompts: str | None = option(
        None,
        "directory from `scd generate stigma` (scd run: generated)",
        required=True,
        pin=Pin.NEVER,  # the probe's table in it is hashed (StigmaProbe.inputs)
    )
    limit_conditions: int | None = option(
        None,
        "scd run: generate the prompts of the first N conditions per group",
        check=positive,
        flag=False,
        pin=Pin.NEVER,  # it shapes the prompts, whose table is hashed
    )
    seed: int = option(0, "seed of the bootstrap CIs")
    chunk_size: int = option(256, "prompts per resumable chunk", check=positive)


def _config(model: str) -> Any:
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(model)
    except (OSError, ValueError) as err:
        raise InputError(
            "cannot load a model config (a local model directory or a Hub id is expected): "
            f"{first_line(err)}",
            key="model",
            value=model,
        ) from None


def _kind(config: Any) -> str:
    archs = config.architectures or []
    if any(a.endswith("ForMaskedLM") for a in archs) or is_xlnet(config):
        return "masked"  # XLNet: a permutation LM, used as a masked LM by Mei et al. 2023
    if any(a.endswith("ForSequenceClassification") for a in archs):
        return "classifier"
    return "causal"


def model_kind(model: str) -> str:
    """``causal``, ``masked`` or ``classifier``, from the model config's architectures; an
    XLNet LM (``XLNetLMHeadModel``, which transformers also maps as a causal LM) is ``masked``:
    the ``mlm`` probe predicts its masked word as Mei et al. 2023 did
    (:mod:`~scd.eval.benchmarks.stigma.xlnet`)."""
    return _kind(_config(model))


class StigmaProbe(Benchmark):
    """A stigma probe: its prompt table, the model kinds it scores, how it loads a scorer, how
    it summarizes records, and its Markdown."""

    table_file: ClassVar[str]  # the table of `scd generate stigma` it reads (without .parquet)
    scores_xlnet: ClassVar[bool] = False  # whether a "masked" XLNet fits (the mlm probe only)
    chat_turn: ClassVar[bool] = False  # most probes put a completion or masked text, no chat turn

    def scorer(self, task: StigmaTask, progress: bool) -> Scorer:
        """Rows -> records, for the task's model (loaded here)."""
        raise NotImplementedError

    def summarize(self, records: list[dict[str, Any]], task: StigmaTask) -> dict[str, Any]:
        raise NotImplementedError

    def markdown(self, summary: dict[str, Any], title: str) -> str:
        """``OUT/tables.md`` under the heading ``title``."""
        raise NotImplementedError

    def kind(self) -> dict[str, str]:
        return {"kind": "stigma_eval", "probe": self.name}

    def inputs(self, options: Any) -> dict[str, Path]:
        return {"prompts": Path(options.prompts) / f"{self.table_file}.parquet"}

    def task(self, model: CausalModel, options: Any) -> StigmaTask:
        from scd.data_gen.stigma_probes import read_stigma_table
        from scd.models import resolve_model

        model = dataclasses.replace(model, spec=self.runs_on(model.spec))  # as evaluate() does
        rows = read_stigma_table(options.prompts, self.table_file)
        loadable = resolve_model(model.model)  # a GGUF file is converted once (cached)
        model_config = _config(loadable)
        kind, xlnet = _kind(model_config), is_xlnet(model_config)
        if kind not in self.model_kinds:
            hint = "use the mlm probe" if xlnet else HINT[kind]
            raise InputError(
                f"a {kind} model does not fit the {self.name} probe; {hint}",
                key="model",
                value=model.model,
            )
        if xlnet and not self.scores_xlnet:
            raise InputError(
                f"XLNet does not fit the {self.name} probe: PLL-word-l2r is defined for "
                "BERT-style masked LMs (a mask token in the input), XLNet masks by permutation; "
                "use the mlm probe",
                key="model",
                value=model.model,
            )
        if model.spec.backend != "hf" and kind != "causal":
            raise InputError(
                f"the {self.name} probe on a {kind} model runs on hf only",
                key="backend",
                value=model.spec.backend,
            )
        config = {
            **self.identity(options, model.model, model.adapter, model.spec),
            "model_kind": kind,
            "n_items": len(rows),
        }
        model = dataclasses.replace(model, model=loadable)
        return StigmaTask(
            config,
            rows,
            options.chunk_size,
            model,
            probe=self,
            kind=kind,
            options=options,
            xlnet=xlnet,
        )

    def headline(self, summary: dict[str, Any]) -> dict[str, Any]:
        return {"gap": summary["gap"]["gap"]}

    def describe(self, summary: dict[str, Any]) -> str:
        g = summary["gap"]
        fmt = lambda x: "–" if x is None else f"{x:+.3f}"  # noqa: E731
        return (
            f"gap stigmatized - non-stigmatized {fmt(g['gap'])} [{fmt(g['ci_low'])}, "
            f"{fmt(g['ci_high'])}]"
        )

    def table(self, runs: dict[str, Path | str]) -> Table:
        """Finished runs of an SDS, mlm or sentiment probe side by side (:func:`gap_lines`)."""
        from scd.eval.benchmarks.tables import read_summaries

        what = "proportion negative" if self.name == "sentiment" else "P(negative attitude)"
        lines, rows = gap_lines(read_summaries(runs, self.name, probe=True))
        note = (
            f"Cells: mean {what} per condition group (conditions); gap = stigmatized − "
            "non-stigmatized, 95% BCa bootstrap CI over conditions (aggregated as in Mei et "
            "al. 2023)."
        )
        md = [f"## Stigma: {what} ({self.name} probe)", "", *lines, note, ""]
        return Table("\n".join(md), rows, f"stigma-{self.name}")

    # -- in scd run: the probe prompts generated once per condition limit ------------------------
    def prepare(self, run: RunData, options: Any) -> Any:
        if options.prompts is not None:
            return options
        from scd.data_gen.stigma_probes import generate_stigma

        limit = options.limit_conditions
        name = "stigma" if limit is None else f"stigma-{limit}"
        out = run.dir / "data" / name
        run.stage(
            f"{name}_prompts",
            [out / "manifest.json"],
            lambda: generate_stigma(out, limit_conditions=limit),
        )
        return dataclasses.replace(options, prompts=str(out))


@dataclass(kw_only=True)
class StigmaTask(CausalTask):
    """One stigma probe on a causal LM (through an engine), a masked LM or a classifier."""

    probe: StigmaProbe
    kind: str
    options: Any
    xlnet: bool = False  # an XLNet LM (kind "masked"): loaded as XLNetLMHeadModel
    unit = "prompt"

    @property
    def name(self) -> str:
        return f"scd eval {self.probe.name}"

    def load_hf(self) -> tuple[Any, Any, str, int]:
        """The masked LM (XLNet: its ``XLNetLMHeadModel``, which ``AutoModelForMaskedLM`` does
        not map) or classifier (a PEFT adapter unmerged) and its tokenizer, the device it is on
        and its batch size (hf engine options).

        Raises:
            InputError: it cannot be loaded, or a masked LM's tokenizer has no mask token.
        """
        import torch
        from transformers import AutoModelForMaskedLM, AutoTokenizer, XLNetLMHeadModel
        from transformers import AutoModelForSequenceClassification as Classifier

        Masked = XLNetLMHeadModel if self.xlnet else AutoModelForMaskedLM  # noqa: N806
        spec, name, masked = self.model.spec, self.model.model, self.kind == "masked"
        device = spec.device or ("cuda" if torch.cuda.is_available() else "cpu")
        try:
            tokenizer = AutoTokenizer.from_pretrained(name)
            model = (Masked if masked else Classifier).from_pretrained(name)
        except (OSError, ValueError) as err:
            what = "a masked LM" if masked else "a classifier"
            raise InputError(
                f"cannot load {what}: {first_line(err)}", key="model", value=name
            ) from None
        if masked and tokenizer.mask_token is None:
            raise InputError("the tokenizer has no mask token", key="model", value=name)
        if self.model.adapter:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, self.model.adapter)
        use_threads(n_parameters(model))  # torch's threads for its size (scd.config.threads)
        return model.to(device).eval(), tokenizer, device, spec.batch_size or EVAL_BATCH_SIZE

    def load(self, progress: bool) -> None:
        self._score = self.probe.scorer(self, progress)

    def score(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return self._score(rows)

    def summarize(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        return {"probe": self.probe.name, **self.probe.summarize(records, self)}

    def render(self, summary: dict[str, Any]) -> dict[str, str]:
        title = f"Stigma probe {self.probe.name}: {evaluated(summary)}"
        return {"tables.md": self.probe.markdown(summary, title)}


def fmt(x: Any, digits: int = 3, sign: bool = False) -> str:
    """A number for a table (an en dash for None; a label as it is)."""
    if x is None or isinstance(x, str):
        return x or "–"
    return f"{x:{'+' if sign else ''}.{digits}f}" if abs(x) >= 1e-3 or x == 0 else f"{x:.2g}"


def gap_cell(g: dict[str, Any]) -> str:
    """``"+0.200 [0.163, 0.238]"``."""
    return f"{fmt(g['gap'], sign=True)} [{fmt(g['ci_low'])}, {fmt(g['ci_high'])}]"


def gap_lines(summaries: dict[str, dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    """SDS, mlm or sentiment summaries side by side (a column each): the group means, the
    stigmatized - non-stigmatized gap with its 95% CI and Welch p, its change against the first
    column, the categories and the no-condition baselines; Markdown lines (a table and a blank
    line) and tidy rows."""
    from scd.eval.benchmarks.tables import markdown_table

    names = list(summaries)
    gaps = {n: s["gap"] for n, s in summaries.items()}
    first = gaps[names[0]]["gap"]
    change = {
        n: None if g["gap"] is None or first is None else g["gap"] - first for n, g in gaps.items()
    }
    cells = [
        ["Stigmatized", *(f"{fmt(g['mean_x'])} ({g['n_x']})" for g in gaps.values())],
        ["Non-stigmatized", *(f"{fmt(g['mean_y'])} ({g['n_y']})" for g in gaps.values())],
        ["Gap [95% CI]", *(gap_cell(g) for g in gaps.values())],
        ["Welch p", *(fmt(g["p_welch"], 4) for g in gaps.values())],
    ]
    if len(names) > 1:
        cells.append([f"Change vs {names[0]}", *(fmt(change[n], sign=True) for n in names)])
    rows = [{"run": n, "scope": "gap", **gaps[n], "change": change[n]} for n in names]
    for scope, key in (("category", "by_category"), ("baseline: template", "baseline")):
        for item in dict.fromkeys(k for s in summaries.values() for k in s[key]):
            values = [summaries[n][key].get(item) for n in names]
            values = [v.get("mean") if isinstance(v, dict) else v for v in values]
            label = item.replace("_", "-") if key == "by_category" else f"Baseline, template {item}"
            cells.append([label, *map(fmt, values)])
            rows += [
                {"run": n, "scope": f"{scope}: {item}", "mean": v} for n, v in zip(names, values)
            ]
    return markdown_table(["", *names], cells), rows
