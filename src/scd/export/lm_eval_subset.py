"""One of lm-evaluation-harness's own task files pointed at local documents: its YAML (and its
``utils.py``) as lm-eval ships them, the Hub dataset swapped for a JSON-lines file of the items
given -- so that lm-eval scores exactly the items scd scored (a subset, or a copy from the
reference data) by its own definitions. scd's agreement tests and
``benchmarks/validate_bbq_lm_eval.py`` run it beside scd."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

__all__ = ["lm_eval_task_on"]


def lm_eval_task_on(root: Path, task_file: str, name: str, docs: list[dict[str, Any]]) -> Path:
    """Write ``root/<name>.yaml``: lm-eval's ``tasks/<task_file>`` renamed ``name``, its tags
    dropped and its dataset ``docs`` (written to ``root/docs.jsonl``); its ``utils.py`` beside
    it. Returns ``root``, for lm-eval's ``include_path``."""
    import lm_eval

    source = Path(lm_eval.__file__).parent / "tasks" / task_file
    root.mkdir(parents=True)
    data = root / "docs.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    text = source.read_text(encoding="utf-8")
    text = re.sub(r"(?ms)^tag:\n(  - .*?\n)+", "", text)
    text = re.sub(r"(?m)^task: .*$", f"task: {name}", text)
    text = re.sub(r"(?m)^dataset_name: .*\n", "", text)
    swap = f"dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}"
    text = re.sub(r"(?m)^dataset_path: .*$", swap, text)
    (root / f"{name}.yaml").write_text(text, encoding="utf-8")
    if (source.parent / "utils.py").is_file():
        shutil.copy(source.parent / "utils.py", root / "utils.py")
    return root
