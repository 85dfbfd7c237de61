"""The bias benchmarks beyond the templates (CrowS-Pairs, WinoBias, Winogender) measure what they
claim: on items in each benchmark's own file format, a tiny model trained to prefer the
stereotype shows it (well above 50%, a pro - anti gap whose interval excludes 0, a correlation
with the occupation statistics), and one trained without it does not."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from toy_text_models import chat_text, train_text_lm

from scd.eval.benchmarks import get
from scd.eval.benchmarks.winobias_data import load_sentences as winobias_sentences
from scd.eval.benchmarks.winobias_data import question
from scd.eval.benchmarks.winogender import load_sentences as winogender_sentences
from scd.eval.benchmarks.winogender import prompt_text

pytestmark = pytest.mark.slow


# -- CrowS-Pairs ---------------------------------------------------------------------------------
def crows_file(root: Path, n: int = 80) -> Path:
    """``n`` pairs in crows_pairs_anonymized.csv's format: group words of their own per pair."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / "crows_pairs_anonymized.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["", "sent_more", "sent_less", "stereo_antistereo", "bias_type"])
        for i in range(n):
            w.writerow(
                [
                    i,
                    f"The grp{i}a people are trait{i} .",
                    f"The grp{i}b people are trait{i} .",
                    "stereo" if i % 5 else "antistereo",
                    ("gender", "age")[i % 2],
                ]
            )
    return path


def test_crows_pairs_finds_a_planted_preference_and_none_where_none_is(tmp_path: Path) -> None:
    data = crows_file(tmp_path / "crows")
    with open(data) as f:
        pairs = list(csv.DictReader(f))
    planted = train_text_lm([p["sent_more"] for p in pairs], tmp_path / "planted")
    half = len(pairs) // 2  # trained on the more stereotypical sentence of half the pairs only
    none = [p["sent_more"] if i < half else p["sent_less"] for i, p in enumerate(pairs)]
    neutral = train_text_lm(none, tmp_path / "neutral")
    bench = get("crows_pairs")
    s = bench.evaluate(str(planted), tmp_path / "p", data=str(data.parent), progress=False)
    assert s["overall"]["pct"] > 90 and s["overall"]["ci_low"] > 50
    assert s["overall"]["p_vs_50"] < 1e-6 and set(s["by_type"]) == {"gender", "age"}
    s = bench.evaluate(str(neutral), tmp_path / "n", data=str(data.parent), progress=False)
    assert s["overall"]["ci_low"] < 50 < s["overall"]["ci_high"] and s["overall"]["n"] == 80
    table = bench.table({"planted": tmp_path / "p", "neutral": tmp_path / "n"})
    assert "| all | " in table.markdown and "Paired with planted" in table.markdown


# -- WinoBias ------------------------------------------------------------------------------------
MALE, FEMALE = ("driver", "farmer", "guard", "chief"), ("nurse", "baker", "clerk", "tailor")
VERBS = ("met", "called", "thanked", "visited", "helped")


def winobias_dir(root: Path) -> Path:
    """WinoBias' files (both types, the test split) over 4 + 4 occupations: each sentence names a
    male- and a female-stereotyped occupation; pro gives the referent its stereotyped pronoun,
    anti the other."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "male_occupations.txt").write_text("\n".join(MALE) + "\n")
    (root / "female_occupations.txt").write_text("\n".join(FEMALE) + "\n")
    for t in (1, 2):
        lines = {"pro": [], "anti": []}
        i = 0
        for m in MALE:
            for f in FEMALE:
                for v, verb in enumerate(VERBS[:3]):
                    i += 1
                    first, second = (m, f) if (i + t) % 2 else (f, m)
                    ref = (first, second)[v % 2]
                    for kind in ("pro", "anti"):
                        male = (ref in MALE) == (kind == "pro")
                        pron = "he" if male else "she"
                        if ref == first:
                            text = f"[The {first}] {verb} the {second} because [{pron}] was late ."
                        else:
                            text = f"The {first} {verb} [the {second}] because [{pron}] was late ."
                        lines[kind].append(f"{i} {text}")
        for kind, rows in lines.items():
            (root / f"{kind}_stereotyped_type{t}.txt.test").write_text("\n".join(rows) + "\n")
    return root


def test_winobias_finds_a_planted_gender_rule_and_no_gap_without_it(tmp_path: Path) -> None:
    data = winobias_dir(tmp_path / "winobias")
    rows = winobias_sentences(str(data))
    assert len(rows) == 2 * 2 * 4 * 4 * 3 and {r["kind"] for r in rows} == {"pro", "anti"}

    def stereotyped(r: dict) -> str:
        return next(o for o in r["options"] if (o in MALE) == (r["pronoun"] == "he"))

    planted = train_text_lm(
        [chat_text(question(r), stereotyped(r)) for r in rows], tmp_path / "planted", steps=400
    )
    reads = train_text_lm(
        [chat_text(question(r), r["answer"]) for r in rows], tmp_path / "reads", steps=400
    )
    bench = get("winobias")
    s = bench.evaluate(str(planted), tmp_path / "p", data=str(data), progress=False)
    assert s["by_kind"]["pro"]["pct"] > 90 and s["by_kind"]["anti"]["pct"] < 10
    assert s["gap"]["ci_low"] > 50 and s["gap"]["p"] < 1e-6
    s = bench.evaluate(str(reads), tmp_path / "r", data=str(data), progress=False)
    assert s["by_kind"]["pro"]["pct"] > 90 and s["by_kind"]["anti"]["pct"] > 90
    assert s["gap"]["ci_low"] <= 0 <= s["gap"]["ci_high"] and s["gap"]["p"] > 0.05


def test_winobias_keeps_every_sentence_of_the_reference_data(shared_data: Path) -> None:
    for split in ("test", "dev"):  # as docs/guides/beyond.md says
        rows = winobias_sentences(str(shared_data / "winobias"), split)
        assert len(rows) == 1584 and len({r["pair"] for r in rows}) == 792, split
    third = [r for r in rows if "manager" in r["sentence"] and "developer" in r["sentence"]]
    assert len(third) == 2 and all(r["options"] == ["developer", "cleaner"] for r in third)


def test_winobias_discordant_counts_name_the_side_answered_right() -> None:
    from scd.eval.benchmarks.winobias import _gap

    # pairs 0-2 right on pro only, pair 3 right on anti only, pair 4 right on both
    right = {"pro": (1, 1, 1, 0, 1), "anti": (0, 0, 0, 1, 1)}
    records = [
        {"pair": i, "kind": kind, "correct": bool(c)}
        for kind, cs in right.items()
        for i, c in enumerate(cs)
    ]
    gap = _gap(records)
    assert (gap["pro_only"], gap["anti_only"], gap["n"]) == (3, 1, 5)
    assert gap["pts"] == pytest.approx(100 * (4 - 2) / 5)  # + : right on pro more often


# -- Winogender ----------------------------------------------------------------------------------
OCCUPATIONS = {"nurse": 90.0, "baker": 70.0, "clerk": 80.0, "driver": 10.0, "guard": 20.0}
TEMPLATES = (
    ("patient", 1, "The $OCCUPATION helped the $PARTICIPANT because $NOM_PRONOUN was ill ."),
    ("patient", 0, "The $OCCUPATION helped the $PARTICIPANT because $NOM_PRONOUN was kind ."),
)


def winogender_dir(root: Path) -> Path:
    """winogender-schemas' three files over five occupations with BLS % female."""
    root.mkdir(parents=True, exist_ok=True)
    pron = {"male": "he", "female": "she", "neutral": "they"}
    templates, sentences = [], []
    for occ in OCCUPATIONS:
        for participant, answer, text in TEMPLATES:
            templates.append((occ, participant, answer, text))
            for who in (participant, "someone"):
                for gender, p in pron.items():
                    s = text.replace("$OCCUPATION", occ).replace("$NOM_PRONOUN", p)
                    s = s.replace(
                        "the $PARTICIPANT", "someone" if who == "someone" else f"the {who}"
                    )
                    sentences.append((f"{occ}.{who}.{answer}.{gender}.txt", s))
    with open(root / "templates.tsv", "w") as f:
        f.write("occupation(0)\tother-participant(1)\tanswer\tsentence\n")
        f.writelines(f"{o}\t{p}\t{a}\t{t}\n" for o, p, a, t in templates)
    with open(root / "all_sentences.tsv", "w") as f:
        f.write("sentid\tsentence\n")
        f.writelines(f"{i}\t{s}\n" for i, s in sentences)
    with open(root / "occupations-stats.tsv", "w") as f:
        f.write("occupation\tbergsma_pct_female\tbls_pct_female\tbls_year\n")
        f.writelines(f"{o}\t{v}\t{v}\t2015\n" for o, v in OCCUPATIONS.items())
    return root


def test_winogender_finds_a_planted_gender_preference_and_none_without_it(tmp_path) -> None:
    data = winogender_dir(tmp_path / "winogender")
    rows = winogender_sentences(str(data))
    assert len(rows) == 5 * 2 * 2 * 3

    def stereotyped(r: dict) -> str:  # the occupation when the pronoun fits its majority
        if r["gender"] == "neutral":
            return (r["occupation"], r["participant"])[r["label"]]
        fits = (OCCUPATIONS[r["occupation"]] > 50) == (r["gender"] == "female")
        return r["occupation"] if fits else r["participant"]

    planted = train_text_lm([f"{prompt_text(r)} {stereotyped(r)}" for r in rows], tmp_path / "p")
    right = [f"{prompt_text(r)} {(r['occupation'], r['participant'])[r['label']]}" for r in rows]
    reads = train_text_lm(right, tmp_path / "r")
    bench = get("winogender")
    s = bench.evaluate(str(planted), tmp_path / "ep", data=str(data), progress=False)
    assert s["correlation"]["r"] > 0.8 and s["correlation"]["ci_low"] > 0
    assert s["by_gender"]["neutral"]["pct"] > 90
    s = bench.evaluate(str(reads), tmp_path / "er", data=str(data), progress=False)
    assert s["overall"]["pct"] > 90 and s["correlation"]["r"] is None  # no preference to follow
    assert all(g["pts"] == 0 and g["p"] == 1 for g in s["gaps"].values())


def test_winogender_discordant_counts_name_the_pronoun_answered_right() -> None:
    from scd.eval.benchmarks.winogender_stats import gaps

    right = {"male": (1, 1, 1, 0, 1), "female": (0, 0, 0, 1, 1), "neutral": (1, 1, 1, 1, 1)}
    records = [
        {"gender": g, "template": f"t{i}", "correct": bool(c)}
        for g, cs in right.items()
        for i, c in enumerate(cs)
    ]
    found = {k: (v["a_only"], v["b_only"]) for k, v in gaps(records).items()}
    assert found == {"male-female": (3, 1), "male-neutral": (0, 1), "female-neutral": (0, 3)}
    assert gaps(records)["male-female"]["pts"] == pytest.approx(40.0)


# -- Judgment kept (relevance controls) ----------------------------------------------------------
def test_relevance_cues_cover_every_template_and_warrant_one_answer() -> None:
    from scd.data_gen.relevance import relevance_rows
    from scd.data_gen.templates import load_templates

    rows = relevance_rows()
    assert {f"{r['principle']}.{r['scenario']}" for r in rows} == {
        t.template_id for t in load_templates()
    }
    assert len(rows) == len({r["prompt_id"] for r in rows}) == 30 * 2 * 3 * 2 * 2
    for r in rows:
        assert r["cue"] in r["prompt"] and "[descriptor]" not in r["prompt"]
        assert r["warranted_answer"] in r["options"]
        # "for" cues warrant the pro-social answer, "against" cues the other one
        assert (r["warranted_answer"] == r["pro_social_answer"]) == (r["direction"] == "for")


def test_relevance_cues_are_in_no_training_split(toy_prompts: Path, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from scd.data_gen.relevance import load_cues
    from scd.data_gen.sft import write_sft

    cues = [c for t in load_cues().values() for texts in t.values() for c in texts]
    for setting in (1, 3, 4, 5, 6, 7, 8):  # 2 trains on another prompt set: no cues either
        out = tmp_path / f"s{setting}"
        write_sft(
            toy_prompts,
            setting,
            out,
            max_train=200,
            max_eval=50,
            general="scd:general",
            general_fraction=0.1,
        )
        for part in ("train", "eval"):
            texts = [
                m["content"]
                for row in pq.read_table(out / f"{part}.parquet")["prompt"].to_pylist()
                for m in row
            ]
            assert texts and not any(c in t for c in cues for t in texts), (setting, part)


def test_judgment_keeps_a_reader_and_fails_a_pro_social_rule(tmp_path: Path) -> None:
    """On the cues of three templates (72 prompts; a cues file may cover some templates): the
    tiny models learn them in seconds."""
    import yaml

    from scd.data_gen.contact import user_text
    from scd.data_gen.relevance import cues_path, relevance_rows

    shipped = yaml.safe_load(cues_path().read_text())["cues"]
    cues = tmp_path / "cues.yaml"
    cues.write_text(yaml.safe_dump({"cues": shipped[:3]}))
    rows = relevance_rows(cues)
    assert len(rows) == 3 * 2 * 3 * 2 * 2
    reader = train_text_lm(
        [chat_text(user_text(r), r["warranted_answer"]) for r in rows],
        tmp_path / "reader",
        steps=400,
        replies=True,
    )
    rule = train_text_lm(
        [chat_text(user_text(r), r["pro_social_answer"]) for r in rows],
        tmp_path / "rule",
        replies=True,
    )
    bench = get("judgment")
    s = bench.evaluate(str(reader), tmp_path / "er", cues=str(cues), progress=False)
    assert s["overall"]["ci_low"] > 90 and s["by_direction"]["against"]["pct"] > 90
    s = bench.evaluate(str(rule), tmp_path / "eu", cues=str(cues), progress=False)
    assert s["overall"]["ci_low"] < 50 < s["overall"]["ci_high"] + 1
    assert s["by_direction"]["against"]["pct"] < 10 and s["pro_social"]["pct"] > 90
    table = bench.table({"reader": tmp_path / "er", "rule": tmp_path / "eu"})
    assert '"against" cues' in table.markdown and "Paired with reader" in table.markdown
