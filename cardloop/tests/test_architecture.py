"""The architecture holds: layers, a leaf Feishu adapter, and no import cycles anywhere.

`lint-imports` (import-linter, configured in `pyproject.toml`) checks the contracts in
`make check`; these tests run it too, show that a deliberate upward import breaks it (so the
contract is not vacuous), and check the whole module graph for cycles with grimp, which
import-linter's sibling contract does not cover (two modules in different sub-packages).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("cardloop", "analytics", "feedback", "interactions", "botadmin", "plumbing")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def _strongly_connected(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """Tarjan's algorithm over `modules` (iterative: the graph is a few hundred nodes)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for start in sorted(modules):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in modules:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append(
                        (child, iter(sorted(graph.find_modules_directly_imported_by(child))))
                    )
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def test_the_import_contracts_are_kept():
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BROKEN" not in result.stdout


def test_an_upward_import_breaks_the_layers_contract(tmp_path):
    for name in (*PACKAGES, "pyproject.toml"):
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, tmp_path / name)
    policy = tmp_path / "botadmin" / "policy.py"
    policy.write_text(policy.read_text() + "\nimport feedback.models  # an upward import\n")

    result = _lint_imports(tmp_path)

    assert result.returncode != 0
    assert "botadmin is not allowed to import feedback" in result.stdout.replace("\n", " ")


def test_no_module_is_part_of_an_import_cycle():
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    modules = {m for m in graph.modules if ".tests" not in m and ".migrations" not in m}
    cycles = _strongly_connected(graph, modules)
    assert cycles == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_leaf_contract_names_every_sibling_of_the_feishu_adapter():
    """A new sub-package of interactions must join the leaf contract's forbidden list, or the
    adapter could import it unnoticed."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (leaf,) = [c for c in config["contracts"] if c.get("source_modules") == ["interactions.lark"]]
    siblings = {
        f"interactions.{p.stem}"
        for p in (ROOT / "interactions").iterdir()
        if p.name
        not in {
            "lark",
            "tests",
            "migrations",
            "locale",
            "static",
            "templates",
            "__init__.py",
            "__pycache__",
        }
        and (p.suffix == ".py" or (p / "__init__.py").exists())
    }
    assert siblings <= set(leaf["forbidden_modules"])


def test_the_telegram_leaf_contract_names_every_other_cardloop_module_it_could_reach():
    """The Bot API adapter may import nothing of Cardloop: every sibling of `interactions`
    (but `channels`, its ancestor), every other channel and every other module of the
    Telegram package must be in its forbidden list."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    source = "interactions.channels.telegram.botapi"
    (leaf,) = [c for c in config["contracts"] if c.get("source_modules") == [source]]
    skip = {"tests", "migrations", "locale", "static", "templates", "__init__", "__pycache__"}

    def modules(package: Path, prefix: str) -> set[str]:
        return {
            f"{prefix}.{p.stem}"
            for p in package.iterdir()
            if p.stem not in skip and (p.suffix == ".py" or (p / "__init__.py").exists())
        }

    reachable = (
        modules(ROOT / "interactions", "interactions")
        | modules(ROOT / "interactions" / "channels", "interactions.channels")
        | modules(ROOT / "interactions" / "channels" / "telegram", "interactions.channels.telegram")
    ) - {"interactions.channels", "interactions.channels.telegram", source}
    assert reachable <= set(leaf["forbidden_modules"])
    assert {"cardloop", "analytics", "feedback", "botadmin", "plumbing"} <= set(
        leaf["forbidden_modules"]
    )
