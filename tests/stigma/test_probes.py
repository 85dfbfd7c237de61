"""The four probes end to end on tiny offline models: planted truth, exact scores, resume."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from scd.cli import main
from scd.errors import InputError
from scd.eval.benchmarks import get
from scd.eval.benchmarks.stigma.mlm import load_lexicon, pll_scores
from scd.eval.engines import engine_spec

SHARED_LEXICON = Path(__file__).resolve().parents[2].parent / "shared/data/stigma"


@pytest.fixture(scope="module")
def mlm_run(toy_mlm: Path, stigma_probe_prompts: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "mlm"
    get("mlm").evaluate(str(toy_mlm), out, prompts=stigma_probe_prompts, progress=False)
    return out


def test_mlm_probe_recovers_planted_gap(mlm_run: Path) -> None:
    s = json.loads((mlm_run / "summary.json").read_text())
    assert s["gap"]["gap"] > 0.4 and s["gap"]["ci_low"] > 0  # stigmatized: negative fills
    assert s["gap"]["n_x"] == s["gap"]["n_y"] == 5
    assert s["mean_rated_share"] > 0.9  # the toy's words are all in the packaged lexicon
    recs = [json.loads(x) for x in (mlm_run / "records.jsonl").read_text().splitlines()]
    assert len(recs) == 392 and all(len(r["top"]) == 10 for r in recs)
    r = recs[0]
    assert r["p_negative"] == pytest.approx(
        r["mass"]["negative"]
        / (r["mass"]["positive"] + r["mass"]["negative"] + r["mass"]["neutral"])
    )
    assert "| Gap [95% CI] | +" in (mlm_run / "tables.md").read_text()


def test_sentiment_probe_gap_and_pearson(
    toy_classifier: Path, stigma_probe_prompts: Path, mlm_run: Path, tmp_path: Path
) -> None:
    s = get("sentiment").evaluate(
        str(toy_classifier),
        tmp_path / "s",
        prompts=stigma_probe_prompts,
        progress=False,
        mlm_run=mlm_run,
    )
    assert s["gap"]["gap"] == pytest.approx(1.0)  # every stigmatized prompt is NEGATIVE
    assert s["baseline"] == {"1": "POSITIVE", "2": "POSITIVE"}
    assert s["correlation"]["n"] == 10 and s["correlation"]["r"] > 0.5


def test_pll_word_l2r_against_naive_loop(toy_mlm: Path) -> None:
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(toy_mlm)
    model = AutoModelForMaskedLM.from_pretrained(toy_mlm).eval()
    text = "I feel scared of a man who has the flu."
    enc = tok(text)
    ids, words = enc["input_ids"], enc.word_ids()
    # word-level tokenizer: one token per word, so PLL-word-l2r is the plain PLL
    naive = 0.0
    for i, w in enumerate(words):
        if w is None:
            continue
        x = torch.tensor([ids])
        x[0, i] = tok.mask_token_id
        with torch.no_grad():
            naive += torch.log_softmax(model(input_ids=x).logits[0, i], -1)[ids[i]].item()
    got = pll_scores(model, [ids], [words], tok.mask_token_id, tok.pad_token_id)[0]
    assert got == pytest.approx(naive, abs=1e-4)
    # multi-token words: a word's later tokens stay masked while its earlier ones are scored
    grouped = [None, 0, 0, 1, 2, 2, 2, 3, None]
    toks = ids[: len(grouped) - 1] + [ids[-1]]
    naive = 0.0
    for i, w in enumerate(grouped):
        if w is None:
            continue
        x = torch.tensor([toks])
        x[0, [j for j in range(i, len(grouped)) if grouped[j] == w]] = tok.mask_token_id
        with torch.no_grad():
            naive += torch.log_softmax(model(input_ids=x).logits[0, i], -1)[toks[i]].item()
    got = pll_scores(model, [toks], [grouped], tok.mask_token_id, tok.pad_token_id)[0]
    assert got == pytest.approx(naive, abs=1e-4)


def _full_loglik(model, tok, text: str) -> float:
    ids = torch.tensor([tok(text)["input_ids"]])
    with torch.no_grad():
        lp = torch.log_softmax(model(input_ids=ids).logits[0, :-1], -1)
    return lp[torch.arange(ids.shape[1] - 1), ids[0, 1:]].sum().item()


def test_causal_aq27_differences_equal_full_sentence_loglik(
    toy_causal: Path, tiny_prompts: Path, tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    s = get("aq27").evaluate(
        str(toy_causal), tmp_path / "a", prompts=tiny_prompts, progress=False, in_vocabulary=False
    )
    assert s["n_frames"] == 27 * 4 and set(s["dimensions"]) == set(s["dimensions"])
    assert len(s["dimensions"]) == 9 and s["scoring"] == "causal_prior_corrected"
    recs = [json.loads(x) for x in (tmp_path / "a/records.jsonl").read_text().splitlines()]
    tok = AutoTokenizer.from_pretrained(toy_causal)
    model = AutoModelForCausalLM.from_pretrained(toy_causal).eval()
    frame = [r for r in recs if r["frame_id"] == recs[0]["frame_id"]]
    from scd.data_gen.stigma_probes import read_stigma_table

    text = {r["prompt_id"]: r["prompt"] for r in read_stigma_table(tiny_prompts, "aq27")}
    a, b = frame[0], frame[-1]
    want = _full_loglik(model, tok, text[a["prompt_id"]]) - _full_loglik(
        model, tok, text[b["prompt_id"]]
    )
    assert a["score_raw"] - b["score_raw"] == pytest.approx(want, abs=1e-4)
    # the prior: the same illness in the neutral sentence, given that sentence's prefix
    from scd.eval.benchmarks.stigma.aq27 import neutral_frame

    row = next(
        r for r in read_stigma_table(tiny_prompts, "aq27") if r["prompt_id"] == a["prompt_id"]
    )
    sentence = neutral_frame(row).replace("<mask>", row["illness"])
    prefix = neutral_frame(row).split(" <mask>")[0]
    prior = _full_loglik(model, tok, sentence) - _full_loglik(model, tok, prefix)
    assert a["score_prior"] == pytest.approx(prior, abs=1e-4)
    assert a["score"] == pytest.approx(a["score_raw"] - a["score_prior"], abs=1e-9)


def test_causal_sds_probability_and_resume(
    toy_causal: Path, tiny_prompts: Path, tmp_path: Path
) -> None:
    out = tmp_path / "sds"
    first = get("sds").evaluate(
        str(toy_causal), out, prompts=tiny_prompts, progress=False, chunk_size=16
    )
    recs = (out / "records.jsonl").read_text().splitlines()
    r = json.loads(recs[0])
    lp = r["option_logprobs"]
    assert r["p_negative"] == pytest.approx(math.exp(lp[1]) / (math.exp(lp[0]) + math.exp(lp[1])))
    assert len(recs) == 28 * 3  # 1 + 1 conditions (one form each) + the baseline
    # resume after a crash mid-file: truncate to 20 records plus a torn line
    (out / "records.jsonl").write_text("\n".join(recs[:20]) + "\n" + recs[20][:7])
    again = get("sds").evaluate(
        str(toy_causal), out, prompts=tiny_prompts, progress=False, chunk_size=16
    )
    assert (out / "records.jsonl").read_text().splitlines() == recs
    assert again["gap"] == first["gap"]
    with pytest.raises(InputError, match="another configuration"):
        get("sds").evaluate(str(toy_causal), out, prompts=tiny_prompts, progress=False, seed=1)


def test_before_after_table(toy_mlm: Path, mlm_run: Path, stigma_probe_prompts: Path, tmp_path):
    table = get("mlm").table({"base": mlm_run, "tuned": mlm_run})
    gap = next(r for r in table.rows if r["run"] == "tuned" and r["scope"] == "gap")
    assert gap["change"] == 0.0 and table.name == "stigma-mlm"
    text = table.markdown
    assert "| Gap [95% CI] |" in text and "| base | tuned |" in text


def test_wrong_model_for_probe_and_bad_lexicon(
    toy_mlm: Path, toy_causal: Path, tiny_prompts: Path, tmp_path: Path
) -> None:
    with pytest.raises(InputError, match="masked model does not fit the sds probe"):
        get("sds").evaluate(str(toy_mlm), tmp_path / "a", prompts=tiny_prompts, progress=False)
    with pytest.raises(InputError, match="causal model does not fit the mlm probe"):
        get("mlm").evaluate(str(toy_causal), tmp_path / "b", prompts=tiny_prompts, progress=False)
    with pytest.raises(InputError, match="runs on hf only"):
        vllm = engine_spec("vllm")
        get("mlm").evaluate(str(toy_mlm), tmp_path / "c", prompts=tiny_prompts, engine=vllm)
    bad = tmp_path / "lex.csv"
    bad.write_text("token,label\nfine,positive\n")
    with pytest.raises(InputError, match="lex.csv: expected columns word,attitude"):
        get("mlm").evaluate(str(toy_mlm), tmp_path / "d", prompts=tiny_prompts, lexicon=bad)
    bad.write_text("word,attitude\nfine,great\n")
    with pytest.raises(InputError, match="line 2: attitude 'great'"):
        load_lexicon(bad)
    with pytest.raises(InputError, match="no sds.parquet"):
        get("sds").evaluate(str(toy_causal), tmp_path / "e", prompts=tmp_path)
    assert not any((tmp_path / x).exists() for x in "abcde")


def test_authors_lexicon_loads() -> None:
    path = SHARED_LEXICON / "mlm_word_attitudes.csv"
    if not path.is_file():
        pytest.skip("reference data absent")
    lex = load_lexicon(path)
    assert len(lex) == 443 and lex["likely"] == "positive"  # 445 rows, 2 case duplicates


def test_cli_generate_eval_report_and_errors(
    toy_mlm: Path, mlm_run: Path, tmp_path: Path, capsys
) -> None:
    assert (
        main(["generate", "stigma", "--limit-conditions", "1", "--out", str(tmp_path / "p")]) == 0
    )
    assert "SDS" in capsys.readouterr().out
    args = ["eval", "stigma", "--probe", "mlm", "--model", str(toy_mlm), "--prompts"]
    assert main([*args, str(tmp_path / "p"), "--out", str(tmp_path / "r"), "--top-k", "5"]) == 0
    assert "gap stigmatized" in capsys.readouterr().out
    assert main([*args, str(tmp_path / "nope"), "--out", str(tmp_path / "r2")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("scd: error: --prompts") and "\n" not in err
    assert main(["report", "stigma", "--runs", f"base={mlm_run}", f"t={tmp_path / 'r'}"]) == 0
    assert "Change vs base" in capsys.readouterr().out


def _length_only_model(src: Path, out: Path, plant: str | None = None) -> Path:
    """A copy of the toy causal LM whose next-token distribution is uniform: every illness name
    costs log(V) per token, so names of different lengths differ and nothing else does. With
    ``plant``, the token after a mental illness's last token is ``plant`` e^2 times more often
    (an association the items that go on after the illness can show; "." ends the neutral
    sentence, so the prior does not share it)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from scd.data_gen.stigma_probes import load_aq27_spec

    tok = AutoTokenizer.from_pretrained(src)
    model = AutoModelForCausalLM.from_pretrained(src)
    spec = load_aq27_spec()
    last = {
        kind: {tok(name, add_special_tokens=False)["input_ids"][-1] for name in names}
        for kind, names in spec.illnesses.items()
    }
    assert not last["mental"] & last["physical"]
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.model.embed_tokens.weight.zero_()
        model.lm_head.weight.zero_()
        if plant:
            hidden = model.config.hidden_size
            for t in last["mental"]:
                model.model.embed_tokens.weight[t, 0] = 1.0  # after the norm: sqrt(hidden) e0
            target = tok.convert_tokens_to_ids(plant)
            model.lm_head.weight[target, 0] = 2.0 / hidden**0.5  # logit 2 after mental names
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def test_aq27_finds_no_bias_where_only_name_lengths_differ(
    toy_causal: Path, tiny_prompts: Path, tmp_path: Path
) -> None:
    model = _length_only_model(toy_causal, tmp_path / "uniform")
    s = get("aq27").evaluate(
        str(model), tmp_path / "a", prompts=tiny_prompts, progress=False, in_vocabulary=False
    )
    recs = [json.loads(x) for x in (tmp_path / "a/records.jsonl").read_text().splitlines()]
    raw = {}
    for r in recs:
        raw.setdefault(r["illness_type"], []).append(r["score_raw"])
    raw_gap = sum(raw["mental"]) / len(raw["mental"]) - sum(raw["physical"]) / len(raw["physical"])
    assert abs(raw_gap) > 0.5  # the raw log-likelihood separates the lists by name length
    o = s["overall"]
    assert abs(o["mean_diff"]) < 1e-4  # the corrected score does not
    assert o["p"] is None or o["p"] > 0.05
    assert all(
        d["p_bonferroni"] is None or d["p_bonferroni"] > 0.05 for d in s["dimensions"].values()
    )


def test_aq27_finds_a_planted_association(toy_causal: Path, tiny_prompts: Path, tmp_path: Path):
    model = _length_only_model(toy_causal, tmp_path / "planted", plant=",")
    s = get("aq27").evaluate(
        str(model), tmp_path / "a", prompts=tiny_prompts, progress=False, in_vocabulary=False
    )
    from scd.data_gen.stigma_probes import read_stigma_table

    rest = {
        r["prompt_id"]: r["frame"].split("<mask>", 1)[1]
        for r in read_stigma_table(tiny_prompts, "aq27")
    }
    recs = [json.loads(x) for x in (tmp_path / "a/records.jsonl").read_text().splitlines()]
    after = [r for r in recs if rest[r["prompt_id"]].startswith(", ")]
    plain = [r for r in recs if rest[r["prompt_id"]].startswith(".")]
    assert after and plain

    def gap(rows):
        m = [r["score"] for r in rows if r["illness_type"] == "mental"]
        p = [r["score"] for r in rows if r["illness_type"] == "physical"]
        return sum(m) / len(m) - sum(p) / len(p)

    assert gap(after) > 1.5  # found where the item goes on after the illness
    assert abs(gap(plain)) < 1e-4  # and nowhere else
    assert s["overall"]["mean_diff"] > 0 and s["overall"]["p"] < 0.05


def test_reporting_stigma_does_not_import_torch() -> None:
    """``scd report stigma`` reads summaries only: the stigma package loads torch lazily."""
    code = (
        "import sys, scd.cli, scd.commands, scd.eval.benchmarks, scd.eval.benchmarks.stigma.aq27\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_system_prompt_reaches_only_a_probe_whose_prompt_is_a_chat_turn(
    toy_causal: Path, tiny_prompts: Path, tmp_path: Path
) -> None:
    from scd.eval.benchmarks import REGISTRY

    spec = engine_spec(system_prompt="Be fair.", device="cpu")
    for name, kept, own in (("sds", "Be fair.", {}), ("aq27", None, {"in_vocabulary": False})):
        bench = REGISTRY[name]  # AQ-27 completes its text: no chat turn
        out = tmp_path / name
        s = bench.evaluate(str(toy_causal), out, engine=spec, prompts=tiny_prompts, **own)
        assert s["run"]["engine"]["system_prompt"] == kept, name  # what the engine ran with
        assert json.loads((out / "run.json").read_text())["system_prompt"] == kept, name
        identity = bench.identity(bench.Options(prompts=str(tiny_prompts), **own), "m", None, spec)
        assert identity["system_prompt"] == kept, name  # the cache key of scd run's base result
