"""What a result depends on is derived in one place: the options' metadata (which fields, how)
plus the hashes of the files it reads (:meth:`Benchmark.identity`). An evaluation pins it in
``run.json``, and ``scd run`` keys a cached base-model result by it."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from scd.config.options import Options, Pin, option
from scd.errors import InputError
from scd.eval.benchmarks import REGISTRY, get
from scd.eval.engines import engine_spec
from scd.eval.records import check_run_config
from scd.io import sha256_file


@dataclass
class Knobs(Options):
    size: int = option(3)
    batch: int = option(8, speed=True)  # speed only: never part of an identity
    where: str | None = option(None, pin=Pin.NEVER)  # an input path: its content is hashed instead
    added: int = option(1, pin=Pin.CHANGED)  # added later: earlier identities lack it
    text: str = option("x", pin=Pin.CHANGED, group="style")
    rule: str | None = option(None, pin=Pin.CHANGED, group="style")  # default: follows text
    shown: str = option("all", pin=Pin.SUMMARY)  # changes the summary, not the records
    ids: list[str] | None = option(None, digest=len)

    def effective(self) -> Knobs:
        return dataclasses.replace(self, rule=self.rule or self.text.upper())


def test_an_options_identity_follows_its_metadata() -> None:
    plain = {"size": 3, "ids": None}
    assert Knobs().identity() == plain
    assert Knobs(batch=1, where="/elsewhere").identity() == plain
    assert Knobs(added=2).identity() == {**plain, "added": 2}
    assert Knobs(rule="X").identity() == plain  # the effective default, given explicitly
    assert Knobs(rule="Z").identity() == {**plain, "text": "x", "rule": "Z"}  # a group: whole
    assert Knobs(text="y").identity() == {**plain, "text": "y", "rule": "Y"}
    assert Knobs(ids=["a", "b", "b"]).identity()["ids"] == 3  # its digest stands for it
    assert Knobs(shown="some").identity() == plain
    assert Knobs(shown="some").identity(summary=True) == {**plain, "shown": "some"}
    every = {**plain, "added": 1, "text": "x", "rule": "X"}
    assert Knobs().identity(every=True) == every


def test_an_earlier_run_json_without_a_key_ran_with_its_default(tmp_path: Path) -> None:
    defaults = Knobs().identity(every=True)
    earlier = {"kind": "knobs", **Knobs().identity()}  # written before "added" existed
    (tmp_path / "run.json").write_text(json.dumps(earlier))
    check_run_config(tmp_path, {"kind": "knobs", **Knobs().identity()}, defaults)
    check_run_config(tmp_path, {"kind": "knobs", **Knobs(added=1).identity(every=True)}, defaults)
    with pytest.raises(InputError, match=r"another configuration \(added differ"):
        check_run_config(tmp_path, {"kind": "knobs", **Knobs(added=2).identity()}, defaults)
    with pytest.raises(InputError, match=r"another configuration \(rule, text differ"):
        check_run_config(tmp_path, {"kind": "knobs", **Knobs(text="y").identity()}, defaults)


@pytest.mark.parametrize("name", ["bias", "bbq", "sds", "aq27", "mlm", "sentiment"])
def test_every_benchmarks_identity_holds_no_speed_option_and_no_input_path(
    name: str, tmp_path: Path
) -> None:
    bench = get(name)
    inputs = tmp_path / "in"
    inputs.mkdir()
    for table in ("prompts", "sds", "aq27", "sentiment"):
        (inputs / f"{table}.parquet").write_bytes(table.encode())
    options = bench.Options(prompts=str(inputs)) if name != "bbq" else bench.Options(data="d")
    spec = engine_spec(device="cpu", batch_size=4, system_prompt="Be fair.")
    identity = bench.identity(options, "model-dir", None, spec)
    assert identity["kind"].endswith("_eval") and identity["model"] == "model-dir"
    assert "batch_size" not in identity and "device" not in identity and "enabled" not in identity
    assert str(inputs) not in json.dumps(identity)  # a moved prompt set is the same input
    for key, path in bench.inputs(options).items():
        assert identity[f"{key}_sha256"] == sha256_file(path)
    assert identity["system_prompt"] == ("Be fair." if bench.chat_turn else None)
    cached = bench.identity(options, "fingerprint", None, spec, cache=True)
    assert cached["dtype"] == "float32"  # "auto" on a CPU: a cache CPU and GPU machines share
    shared = {k: v for k, v in cached.items() if k in identity}
    assert shared == {**identity, "model": "fingerprint", "dtype": "float32"}


def test_the_summary_only_options_key_the_cache_and_not_the_records(
    toy_model: Path, toy_prompts: Path, tmp_path: Path
) -> None:
    bias, spec = REGISTRY["bias"], engine_spec(device="cpu")
    options = {"prompts": toy_prompts, "limit": 10}
    out = tmp_path / "bias"
    first = bias.evaluate(str(toy_model), out, engine=spec, progress=False, **options)
    pinned = (out / "run.json").read_bytes()
    again = bias.evaluate(
        str(toy_model), out, engine=spec, progress=False, denominator="parsed", **options
    )
    assert (out / "run.json").read_bytes() == pinned  # the same records, summarized again
    assert (first["denominator"], again["denominator"]) == ("all", "parsed")
    keys = [
        bias.identity(bias.Options(**options, denominator=d), "m", None, spec, cache=True)
        for d in ("all", "parsed")
    ]
    assert keys[0] != keys[1] and keys[1]["denominator"] == "parsed"


def test_what_a_missing_key_stood_for_never_changes() -> None:
    """Earlier results lack a key pinned only when changed (or added later: dtype) because it had
    this value then; a new default here would let such a run resume and mix records."""
    frozen = {
        "bias": {"protocol": "scd", "rule": "sum", "sets": None},
        "bbq": {
            "permute_options": 1,
            "mode": "choice",
            "max_new_tokens": None,
            "format": "scd",
            "chat_template": True,
        },
    }
    for name, bench in REGISTRY.items():
        defaults = bench.identity_defaults(bench.Options(), engine_spec())
        changed = [
            f.name for f in dataclasses.fields(bench.Options) if f.metadata["pin"] is Pin.CHANGED
        ]
        assert {k: defaults[k] for k in changed} == frozen.get(name, {}), name
        assert defaults["dtype"] == "auto", name  # a run.json of scd 0.1.0 has no dtype
