"""The project's modules import each other without a cycle (imports inside functions count)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("keras_transformer", "train", "export", "bench")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {module_name(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}


def imported(tree: ast.AST, name: str, is_package: bool, modules) -> set[str]:
    """The project modules a module's import statements name, wherever they stand."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package that holds this module
                package = name.split(".") if is_package else name.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, *([base] if base else [])])
            # `from package import module` imports the module; otherwise the name's module.
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                       for a in node.names]
        else:
            continue
        for target in targets:
            # `import a.b.c` names a.b.c; fall back to the longest prefix that is a module.
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imported(ast.parse(path.read_text(encoding="utf-8")), name,
                           path.name == "__init__.py", modules)
            for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None; an iterative depth-first search."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    for start in sorted(graph):
        if start in state:
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            child = next(stack[-1], None)
            if child is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(child) == 1:
                return path[path.index(child):] + [child]
            elif child not in state:
                state[child] = 1
                path.append(child)
                stack.append(iter(sorted(graph.get(child, ()))))
    return None


def test_find_cycle_names_the_cycle_and_accepts_a_tree():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"b", "c"}}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"x": {"y"}, "y": {"y2"}, "y2": {"y"}}) == ["y", "y2", "y"]


def test_the_graph_holds_the_edges_it_should():
    graph = import_graph()
    assert "train.losses" in graph["train.tasks.seq2seq"]
    assert "train.run" in graph["train.cli"]  # an import inside a function counts
    assert "keras_transformer.text.lines" in graph["export.text_io"]


def test_project_imports_are_acyclic():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_train_tasks_sit_below_the_engine():
    """The engine drives tasks; a task imports the losses and batch helpers from their own
    modules, never the engine or what runs it."""
    graph = import_graph()
    assert "train.tasks.base" in graph["train.engine"]
    tasks = [name for name in graph if name.startswith("train.tasks.")]
    assert len(tasks) >= 6
    for name in tasks:
        assert not graph[name] & {"train.engine", "train.run", "train.cli"}, name
