"""Contact prompt generation: Table 2 verbatim, counts, answers, determinism, descriptors."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from scd.data_gen.contact import COLUMNS, generate_contact_table, write_prompts
from scd.data_gen.descriptors import (
    Descriptor,
    DescriptorSet,
    load_holistic_bias,
    load_stigma_descriptors,
)
from scd.data_gen.templates import (
    ACTIONS,
    CONTACTS,
    PRINCIPLES,
    SCENARIOS,
    CompiledPrompt,
    compile_prompt,
    load_scales,
    load_templates,
)

PLACEHOLDER = Descriptor("x", "x", "[descriptor]")
PRINCIPLE_NAMES = {
    "Equal Group Status": "equal_status",
    "Common Goals": "common_goals",
    "Intergroup Cooperation": "intergroup_cooperation",
    "Support of Authorities, Law or Custom": "support_of_authorities",
    "Extended Contact": "extended_contact",
    "Virtual Contact": "virtual_contact",
}


def render(compiled: CompiledPrompt, group: Callable[[str], str]) -> str:
    """A compiled prompt as text; ``group(noun)`` is the group mention for a noun."""
    mentions = [group(noun) for noun in compiled.nouns] + [""]
    return "".join(part + mention for part, mention in zip(compiled.parts, mentions))


def _table2(seeds_dir: Path) -> dict[tuple[str, str], tuple[str, str, str]]:
    """Parse Table 2 of the SCD paper (tab-separated rows) from the seed text."""
    text = (seeds_dir / "004_a0307702d21d1519.txt").read_text(encoding="utf-8")
    block = text[text.index("Key Principle\tScenario") : text.index("Table 2:")]
    rows, principle = {}, None
    for line in block.splitlines()[1:]:
        cells = line.split("\t")
        if len(cells) != 5:
            continue
        principle = PRINCIPLE_NAMES.get(cells[0], principle)
        rows[(principle, cells[1].lower())] = tuple(c.strip() for c in cells[2:])
    return rows


def test_templates_reproduce_table2_verbatim(seeds_dir: Path) -> None:
    table2 = _table2(seeds_dir)
    assert len(table2) == 30
    certainty = load_scales()["certainty"]
    for t in load_templates():
        rendered = tuple(
            render(compile_prompt(t, c, "positive", certainty), PLACEHOLDER.group) for c in CONTACTS
        )
        assert rendered == table2[(t.principle, t.scenario)], t.template_id


def test_all_templates_contacts_actions_present_and_distinct() -> None:
    templates = load_templates()
    assert {(t.principle, t.scenario) for t in templates} == {
        (p, s) for p in PRINCIPLES for s in SCENARIOS
    }
    for scale in load_scales().values():
        texts = [
            render(compile_prompt(t, c, a, scale), PLACEHOLDER.group)
            for t in templates
            for c in CONTACTS
            for a in ACTIONS
        ]
        assert len(texts) == 30 * 3 * 2
        assert len(set(texts)) == len(texts)


def test_every_variant_renders_in_every_scale() -> None:
    scales = load_scales()
    for t in load_templates():
        for c in CONTACTS:
            for a in ACTIONS:
                for name, scale in scales.items():
                    text = render(compile_prompt(t, c, a, scale), PLACEHOLDER.group)
                    assert "{" not in text and "<" not in text and "  " not in text
                    assert text[0].isupper() and text[-1] in ".?"
                    lead = {
                        "certainty": "hould I ",
                        "likelihood": "t is likely/unlikely for me to ",
                        "frequency": "ow often (mostly/rarely) should I ",
                    }[name]
                    assert lead in text, (t.template_id, c, a, name, text)


def test_counts_per_dimension(hb_prompts: Path, hb_data_dir: Path) -> None:
    table = pq.read_table(hb_prompts / "prompts.parquet")
    info = json.loads((hb_prompts / "manifest.json").read_text())
    d = info["n_descriptors"]
    assert d == 520  # HolisticBias v1.0: 524 entries, 4 repeated across axes
    assert info["n_sets"] == 6 * 5 * 2 * 3 * d == 93_600
    assert table.num_rows == info["n_prompts"] == 3 * info["n_sets"]
    assert tuple(table.column_names) == COLUMNS
    counts = info["counts"]
    for column, n in (
        ("principle", 6),
        ("scenario", 5),
        ("action", 2),
        ("scale", 3),
        ("contact", 3),
    ):
        assert len(counts[column]) == n
        assert set(counts[column].values()) == {table.num_rows // n}
    descriptors = load_holistic_bias(hb_data_dir / "holistic_bias/v1.0/descriptors.json")
    per_axis = Counter(x.axis for x in descriptors.descriptors)
    assert counts["axis"] == {axis: 540 * n for axis, n in per_axis.items()}
    sets = Counter(table["set_id"].to_pylist())
    assert set(sets.values()) == {3}


def test_prompts_contain_descriptor_and_answers_follow_action(hb_prompts: Path) -> None:
    rows = pq.read_table(
        hb_prompts / "prompts.parquet",
        columns=[
            "descriptor",
            "prompt",
            "action",
            "options",
            "unbiased_answer",
            "biased_answer",
            "prompt_id",
            "set_id",
            "contact",
        ],
    ).to_pylist()
    for r in rows:
        assert r["descriptor"] in r["prompt"]
        agree, reject = r["options"]
        expected = (agree, reject) if r["action"] == "positive" else (reject, agree)
        assert (r["unbiased_answer"], r["biased_answer"]) == expected
        assert r["prompt_id"] == f"{r['set_id']}-{r['contact']}"
    assert len({r["prompt_id"] for r in rows}) == len(rows)
    assert len({r["prompt"] for r in rows}) == len(rows)


def test_same_inputs_give_byte_identical_files(hb_data_dir: Path, tmp_path: Path) -> None:
    path = hb_data_dir / "holistic_bias/v1.0/descriptors.json"
    for name in ("a", "b"):
        write_prompts(tmp_path / name, load_holistic_bias(path))
    for file in ("prompts.parquet", "manifest.json"):
        assert (tmp_path / "a" / file).read_bytes() == (tmp_path / "b" / file).read_bytes()


def test_ids_are_stable_when_the_descriptor_list_changes(hb_data_dir: Path) -> None:
    path = hb_data_dir / "holistic_bias/v1.0/descriptors.json"
    full = generate_contact_table(load_holistic_bias(path))
    reduced = generate_contact_table(load_holistic_bias(path, drop_dispreferred=True))
    assert reduced.num_rows < full.num_rows
    full_ids = dict(zip(full["prompt_id"].to_pylist(), full["prompt"].to_pylist()))
    for pid, prompt in zip(reduced["prompt_id"].to_pylist(), reduced["prompt"].to_pylist()):
        assert full_ids[pid] == prompt


@pytest.mark.parametrize("version", ["v1.0", "v1.1"])
def test_holistic_bias_versions_load(hb_data_dir: Path, version: str) -> None:
    base = hb_data_dir / "holistic_bias" / version
    plain = load_holistic_bias(base / "descriptors.json")
    assert len({d.axis for d in plain.descriptors}) == 13
    texts = [d.text for d in plain.descriptors]
    assert len(texts) == len(set(texts))
    dropped = load_holistic_bias(base / "descriptors.json", drop_dispreferred=True)
    assert all(d.preference not in ("dispreferred", "polarizing") for d in dropped.descriptors)
    assert len(dropped.descriptors) < len(plain.descriptors)
    with_np = load_holistic_bias(
        base / "descriptors.json", noun_phrases=base / "standalone_noun_phrases.json"
    )
    phrases = [d for d in with_np.descriptors if d.position == "after"]
    assert len(phrases) > 50
    assert all("{" not in d.text for d in phrases)
    assert "students who use wheelchairs" in {d.group("students") for d in phrases}
    assert "students who are wheelchair users" in {d.group("students") for d in phrases}


def test_noun_phrases_read_naturally(hb_data_dir: Path) -> None:
    base = hb_data_dir / "holistic_bias/v1.0"
    ds = load_holistic_bias(
        base / "descriptors.json", noun_phrases=base / "standalone_noun_phrases.json"
    )
    wheel = DescriptorSet([d for d in ds.descriptors if d.text == "who use wheelchairs"], {})
    prompts = generate_contact_table(wheel)["prompt"].to_pylist()
    assert "Should I collaborate with students who use wheelchairs on a project?" in prompts
    assert not any("[descriptor]" in p or "<" in p for p in prompts)


def test_stigma_descriptors_cover_all_conditions() -> None:
    ds = load_stigma_descriptors()
    conditions = {(d.preference, d.bucket) for d in ds.descriptors}
    assert sum(p == "stigmatized" for p, _ in conditions) == 93
    assert sum(p == "non_stigmatized" for p, _ in conditions) == 29
    groups = {d.group("students") for d in ds.descriptors}
    assert any(g.startswith("students who have ") for g in groups)
    assert any(g.startswith("students who are ") for g in groups)
    table = generate_contact_table(ds)
    assert table.num_rows == 540 * len(ds.descriptors)
