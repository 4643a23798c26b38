"""The package's structure, drawn from its own imports, and how fast a command can say no.

    python benchmarks/structure.py [--no-timing] [-o FILE.json]

Reads every module of `bertscope/` with `ast` (nothing is imported) and reports:
- `circles`: groups of modules that import each other, directly or round a loop;
- `upward`: imports from a lower layer to a higher one (the layers are `LAYERS`, lowest
  first: a module may import its own layer and the ones below it);
- `largest`: the three longest modules, in lines;
- with timing, the seconds `bertscope attention ''` takes to refuse an empty text, against
  `python -c "import torch, transformers"` in the same run (best of three each).

`tests/test_architecture.py` holds the package to no circles and no upward imports.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
import time
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "bertscope"

# Lowest first, one top-level package (or module) each, as `ls bertscope` shows them; the api layer is the
# package's own modules (`bertscope`, `api`, `session_backend`). A module belongs to the layer of the longest
# name that is it or contains it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("bertscope.base",)),  # errors, progress records, the collector's pauses, themes: plain Python
    ("data", ("bertscope.data",)),
    ("figures", ("bertscope.figures",)),  # matplotlib figures and notebook display, drawn from plain arrays
    ("runtime", ("bertscope.runtime",)),  # torch.distributed's process group: state, and torch on use
    ("model", ("bertscope.model",)),
    ("analyses", ("bertscope.analyses",)),  # by subject: probing, attention, importance, geometry, mixing, sae
    ("api", ("bertscope", "bertscope.api", "bertscope.session_backend")),
    ("render", ("bertscope.render",)),
    ("ui", ("bertscope.ui",)),
    ("cli", ("bertscope.cli", "bertscope.__main__")),
]


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Dotted module name → file, for every module of the package."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module → the package's modules it imports (anywhere in its body, lazy imports included)."""
    known = modules(package)
    graph = {}
    for name, path in known.items():
        home = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = home.split(".")[: len(home.split(".")) - node.level + 1]
                    base = ".".join([*parent, *([node.module] if node.module else [])])
                for alias in node.names:
                    submodule = f"{base}.{alias.name}"
                    targets.add(submodule if submodule in known else base)
        graph[name] = {target for target in targets if target in known and target != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return groups


def layer_of(module: str) -> int:
    """The position in `LAYERS` of the module's layer."""
    best, best_length = None, -1
    for position, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_length:
                best, best_length = position, len(prefix)
    if best is None:
        raise ValueError(f"{module} is in no layer of LAYERS")
    return best


def upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Imports from a module to one in a higher layer."""
    return sorted((source, target) for source, targets in graph.items() for target in targets if layer_of(target) > layer_of(source))


def largest(package: Path = PACKAGE, count: int = 3) -> list[tuple[str, int]]:
    sizes = [(name, sum(1 for _ in path.open(encoding="utf-8"))) for name, path in modules(package).items()]
    return sorted(sizes, key=lambda item: -item[1])[:count]


def best_seconds(command: list[str], repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run(command, capture_output=True, check=False)
        best = min(best, time.perf_counter() - started)
    return round(best, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--no-timing", action="store_true", help="Only the import graph.")
    parser.add_argument("-o", "--output", help="Also write the JSON here.")
    args = parser.parse_args()
    graph = import_graph()
    report = {
        "modules": len(graph),
        "imports": sum(len(targets) for targets in graph.values()),
        "circles": circles(graph),
        "upward": [f"{source} -> {target}" for source, target in upward(graph)],
        "largest": [{"module": name, "lines": lines} for name, lines in largest()],
    }
    if not args.no_timing:
        report["empty_text_refused_s"] = best_seconds([sys.executable, "-m", "bertscope", "attention", "", "-l", "0", "-H", "0"])
        report["import_torch_transformers_s"] = best_seconds([sys.executable, "-c", "import torch, transformers"])
    from common import emit  # benchmarks/common.py, found beside this script

    summary = f"{report['modules']} modules, {len(report['circles'])} import circles, {len(report['upward'])} upward imports"
    if "empty_text_refused_s" in report:
        summary += f"; empty text refused in {report['empty_text_refused_s']} s (import torch, transformers: {report['import_torch_transformers_s']} s)"
    emit(report, args.output, summary)


if __name__ == "__main__":
    main()
