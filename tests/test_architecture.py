"""The architecture as docs/ARCHITECTURE.md states it: imports point down the layers and never
form a cycle, and every name the document tells a contributor to use exists."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
# lowest first: a module may import its own layer (without cycles) and those below
LAYERS = (
    ("scd/__init__.py", "scd/errors.py"),
    ("scd/io.py", "scd/hub.py", "scd/progress.py", "scd/tracking.py", "scd/reference_data.py"),
    ("scd/config/",),
    ("scd/data_gen/", "scd/models/"),
    ("scd/eval/", "scd/audit/"),
    ("scd/train/",),  # training measures bias with the evaluation's engines, never the reverse
    ("scd/report/", "scd/export/"),
    ("scd/pipeline/",),
    (
        "scd/quickstart.py",
        "scd/commands.py",
        "scd/cli_parser.py",
        "scd/cli_args.py",
        "scd/cli_audit.py",
        "scd/cli_data.py",
        "scd/cli_export.py",
    ),
    ("scd/cli.py", "scd/__main__.py"),
)


def _module(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in SRC.rglob("*.py")}


def _layer(module: str) -> int:
    rel = MODULES[module].relative_to(SRC).as_posix()
    return next(i for i, layer in enumerate(LAYERS) if any(rel.startswith(x) for x in layer))


MODULE_STRING = re.compile(r"scd(\.\w+)+(:\w+)?")  # "scd.eval.engines.hf:HFEngine", "scd.io"


def _imports(module: str) -> set[str]:
    """The scd modules ``module`` imports, at the top or inside a function, or names in a string
    (a ``"module:Class"`` to import later is a dependency too)."""
    found = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        names = []
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if MODULE_STRING.fullmatch(node.value):
                names = [node.value.partition(":")[0]]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module and name.startswith("scd"):
                found.add(name)
    return found


GRAPH = {m: _imports(m) for m in MODULES}


def test_imports_point_down() -> None:
    upward = [
        f"{a} -> {b}" for a, targets in GRAPH.items() for b in targets if _layer(b) > _layer(a)
    ]
    assert upward == []


def test_one_loader_and_no_command_found_by_a_built_name() -> None:
    """Registries hold classes, registered by the modules that hold them: the only code that
    imports by a name is scd.config.registry.load_object (TRL's classes, imported when a method
    trains), and no command handler is found by building its name."""
    loaders = {
        module
        for module, path in MODULES.items()
        if re.search(r"import_module|__import__|getattr\(commands", path.read_text())
    }
    assert loaders == {"scd.config.registry"}


def test_no_import_cycles() -> None:
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(GRAPH[module]):
            if target == "scd" or (module.startswith(target + ".")):
                continue  # a package's face, imported on the way to its modules
            if state.get(target) == 1:
                pytest.fail("import cycle: " + " -> ".join([*path, module, target]))
            if target not in state:
                visit(target, [*path, module])
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module, [])


def test_no_source_file_is_over_400_lines() -> None:
    long = {
        str(p.relative_to(REPO)): n
        for p in SRC.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 400
    }
    assert long == {}


def test_no_function_is_over_80_lines() -> None:
    long = {
        f"{p.relative_to(REPO)}:{node.name}": node.end_lineno - node.lineno + 1
        for p in (SRC / "scd").rglob("*.py")
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > 80
    }
    assert long == {}


def test_every_arm_and_method_is_importable_by_its_name() -> None:
    from scd.train.arms import ARMS, METHODS, arm_class, arm_names, method_class
    from scd.train.arms.base import Arm, Method

    assert arm_names() == [*ARMS, *METHODS]
    for name in arm_names():
        arm = arm_class(name)
        assert issubclass(arm, Arm) and arm.name == name and arm.help, name
        assert arm.method is None or arm.method in METHODS, name
    for name in METHODS:
        method = method_class(name)
        assert issubclass(method, Method) and method.method == name and method.columns
        assert method().config().__name__.endswith("Config")  # TRL's class, importable


def _string_constants(path: Path) -> set[str]:
    return {
        node.value
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }


def test_a_method_is_named_only_by_its_unit_and_its_registry_line() -> None:
    """No branch chooses a trainer, config or row shape by a method's name: the name is a
    string only in the method's own file (its class's ``name``). Not "sft": it is also the
    name of the SCD training data (``setting-1/sft/``) that every arm uses."""
    from scd.train.arms import METHODS

    methods = set(METHODS) - {"sft"}
    own = {f"scd.train.arms.{m}" for m in methods}
    named = {
        module: sorted(methods & _string_constants(path))
        for module, path in MODULES.items()
        if module not in own
    }
    assert {m: n for m, n in named.items() if n} == {}


def test_the_arena_table_names_no_benchmarks_column() -> None:
    """report/arena*.py build the table from what each benchmark declares: no column key of a
    benchmark (``bbq_accuracy``) nor a key in a benchmark's name (``sds_...``) is written there."""
    from scd.eval.benchmarks import REGISTRY

    arena = sorted((SRC / "scd" / "report").glob("arena*.py"))
    assert len(arena) == 4
    constants = set().union(*(_string_constants(p) for p in arena))
    keys = {c.key for b in REGISTRY.values() for c in b.arena_columns}
    assert len(keys) > 20 and constants & keys == set()
    assert [c for c in constants for b in REGISTRY if c.startswith(f"{b}_")] == []


def test_every_name_the_architecture_document_gives_exists() -> None:
    text = (REPO / "docs" / "ARCHITECTURE.md").read_text()
    names = set(re.findall(r"`(scd(?:\.\w+)+)`", text))
    assert len(names) >= 12
    for name in sorted(names):
        module, attrs = name, []
        while module not in MODULES:
            module, _, attr = module.rpartition(".")
            attrs.insert(0, attr)
        obj = importlib.import_module(module)
        for attr in attrs:
            obj = getattr(obj, attr)  # AttributeError: the document names something gone
    for path in re.findall(r"`(tests/[\w/]+\.py)`", text):
        assert (REPO / path).is_file(), path


def test_every_engine_is_importable_by_its_name() -> None:
    from scd.config.engine import EngineSpec
    from scd.eval.engines import ENGINES, engine_class

    for name in ENGINES:
        engine = engine_class(name)
        assert (
            engine.name == name
            and issubclass(engine.Options, EngineSpec)
            and engine.Options is not EngineSpec
        )
        assert engine.model_kinds and engine.help, name
        for method in ("__init__", "score", "generate", "use_adapter", "close"):
            assert callable(getattr(engine, method, None)), (name, method)
