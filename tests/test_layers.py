"""The package's layers: no module imports from a layer above its own (README, Layout).

Imports are read from the source (every `import` and `from ... import`, also those inside
functions and `TYPE_CHECKING` blocks: a type is a dependency too).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "slidingserve"

BELOW: dict[str, set[str]] = {
    "core": set(),
    "reporting": {"core"},
    "metrics": {"core"},
    "predictor": {"core"},
    "workloads": {"core"},
    "policies": {"core", "predictor"},
    "routing": {"core", "predictor"},
    "sim": {"core", "metrics", "predictor", "policies", "routing", "workloads"},
    "engines": {"core", "predictor", "policies"},
    "bench": {"core", "metrics", "reporting", "workloads"},
    "eval": {
        *("core", "metrics", "predictor", "policies", "reporting", "routing", "sim"),
        "workloads",
    },
    "live": {
        *("core", "metrics", "predictor", "policies", "reporting", "routing", "sim"),
        *("workloads", "bench", "engines", "eval"),
    },
}
"""What each layer may import besides itself; the command line (`cli/`) may import all."""

COMMAND_LINE = "cli"

SIM_BASE = {"hardware"}
"""Inside sim/: the modelled hardware is below the event loop and never imports it."""


def layer_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return parts[0]


def imported_layers(path: Path) -> set[tuple[str, ...]]:
    """Each `slidingserve.*` module path this file imports, without the package name."""
    found: set[tuple[str, ...]] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            parts = tuple(name.split("."))
            if parts[0] == "slidingserve" and len(parts) > 1:
                found.add(parts[1:])
    return found


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_every_module_belongs_to_a_known_layer_or_the_command_line() -> None:
    unknown = {
        layer_of(path)
        for path in modules()
        if layer_of(path) not in {*BELOW, COMMAND_LINE, "__init__"}
    }
    assert unknown == set()


def test_no_module_imports_from_a_layer_above_it() -> None:
    wrong = []
    for path in modules():
        layer = layer_of(path)
        allowed = BELOW.get(layer)
        if allowed is None:
            continue  # the command line
        for target in imported_layers(path):
            if target[0] != layer and target[0] not in allowed:
                wrong.append(f"{path.relative_to(PACKAGE)} imports slidingserve.{'.'.join(target)}")
    assert wrong == []


def test_the_modelled_hardware_never_imports_the_event_loop() -> None:
    wrong = []
    for path in sorted((PACKAGE / "sim" / "hardware").rglob("*.py")):
        for target in imported_layers(path):
            if target[0] == "sim" and (len(target) < 2 or target[1] not in SIM_BASE):
                wrong.append(f"{path.relative_to(PACKAGE)} imports slidingserve.{'.'.join(target)}")
    assert wrong == []


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    module = tmp_path / "bad.py"
    module.write_text("def f():\n    from slidingserve.sim.runner import simulate\n")
    assert ("sim", "runner") in imported_layers(module)
