"""The package's imports point down the layers, and no two files import each other in a circle.

Layers, lowest first (CONTRIBUTING.md, "How the layers stack"); a file may import its own layer
and the ones below it, never one above:

    0  errors, blas, allocator, packaged,   what everything may use
       json_object, memory
    1  ops                              forward/backward pairs on arrays
    2  blocks                           attention, MLP, norms, residual layers, KVCache
    3  models, tokenizers               model families; text <-> ids
    4  io                               files: safetensors, HF folders, GGUF, checkpoints
    5  train, generate, tasks,          what users run on models
       explain, gradcheck, viewer,
       serve, lm_eval
    6  cli                              argument parsing only

Inside layer 5 the packages that run a model stack too (issue 42), lowest first:

    generate  <  train  <  tasks, interpret  <  serve, viewer, lm_eval

decoding knows nothing of training; training uses decoding (GRPO samples its completions with
generate) but none of the tasks; a task may use both, never the server or the viewer, which sit
on top, as does lm_eval (the lm-evaluation-harness door over tasks/evaluate). A package may
import its own rank and the ones below (serve, viewer and lm_eval share the top).
explain, gradcheck and notebooks are outside this order. No exceptions are needed: what train/
once took from generate/ for chat templates and end-of-text ids is the tokenizers' (layer 3).

Every import counts, including one written inside a function: hiding an import in a function
does not change which way the code depends.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "glassformer"

LAYER = {
    "errors": 0, "blas": 0, "allocator": 0, "packaged": 0, "json_object": 0,
    "display": 0, "memory": 0, "version": 0,
    "ops": 1, "kernels": 1,
    "blocks": 2,
    "models": 3, "tokenizers": 3,
    "io": 4,
    "train": 5, "generate": 5, "tasks": 5, "explain": 5, "gradcheck": 5, "viewer": 5,
    "serve": 5, "lm_eval": 5,
    "notebooks": 5, "interpret": 5,
    "cli": 6, "__main__": 6,
}


# the sub-order inside layer 5 (module docstring)
UPPER_RANK = {"generate": 0, "train": 1, "tasks": 2, "interpret": 2, "serve": 3,
              "viewer": 3, "lm_eval": 3}


def module_name(path: Path) -> str:
    """glassformer/models/gpt2.py -> glassformer.models.gpt2 (a package is its __init__)."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """The glassformer modules `path` imports anywhere in it (top level or inside functions)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from a.b import c` imports a.b.c when c is a module, else a.b
            names = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in known
                     else node.module for alias in node.names]
        else:
            continue
        found.update(name for name in names if name.startswith("glassformer"))
    return found


def layer_of(module: str) -> int | None:
    """The layer of a module; the package root `glassformer` itself sits above everything."""
    parts = module.split(".")
    if len(parts) == 1:
        return None
    return LAYER[parts[1]]


def import_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    known = set(files)
    return {name: imported_modules(path, known) for name, path in files.items()}


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for source, targets in sorted(graph.items()):
        here = layer_of(source)
        for target in sorted(targets):
            there = layer_of(target)
            if here is not None and (there is None or there > here):
                bad.append(f"{source} (layer {here}) imports {target} (layer {there})")
    return bad


def upper_rank(module: str) -> int | None:
    """The rank of a module inside layer 5's sub-order, or None outside it."""
    parts = module.split(".")
    return UPPER_RANK.get(parts[1]) if len(parts) > 1 else None


def upward_in_layer_5(graph: dict[str, set[str]]) -> list[str]:
    """Imports from generate/, train/, tasks/ to a package above it in UPPER_RANK."""
    bad = []
    for source, targets in sorted(graph.items()):
        here = upper_rank(source)
        for target in sorted(targets):
            there = upper_rank(target)
            if here is not None and there is not None and there > here:
                bad.append(f"{source} ({source.split('.')[1]}/) imports {target} "
                           f"({target.split('.')[1]}/, above it in layer 5)")
    return bad


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one file (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, groups = {}, {}, set(), [], []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
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
            elif child not in graph:
                continue
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return groups


def test_every_top_level_name_has_a_layer():
    names = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()}
    assert names <= set(LAYER), f"give these a layer in LAYER: {sorted(names - set(LAYER))}"


def test_imports_point_down_the_layers():
    bad = upward_imports(import_graph())
    assert not bad, f"{len(bad)} upward imports:\n" + "\n".join(bad)


def test_imports_point_down_inside_layer_5():
    bad = upward_in_layer_5(import_graph())
    assert not bad, f"{len(bad)} upward imports inside layer 5:\n" + "\n".join(bad)


def test_the_layer_5_order_is_checked():
    # what the rule refuses, on a made-up graph: each package importing the one above it
    graph = {"glassformer.generate.a": {"glassformer.train.b"},
             "glassformer.train.b": {"glassformer.tasks.c", "glassformer.generate.a"},
             "glassformer.tasks.c": {"glassformer.viewer.d", "glassformer.serve.e"},
             "glassformer.viewer.d": {"glassformer.serve.e", "glassformer.tasks.c"},
             "glassformer.serve.e": {"glassformer.explain.f"}}
    assert [line.split()[0] for line in upward_in_layer_5(graph)] == [
        "glassformer.generate.a", "glassformer.tasks.c", "glassformer.tasks.c",
        "glassformer.train.b"]


def test_no_circles_between_files():
    groups = circles(import_graph())
    assert not groups, f"{len(groups)} import circles:\n" + "\n".join(" <-> ".join(g) for g in groups)


if __name__ == "__main__":
    graph = import_graph()
    for line in upward_imports(graph) + upward_in_layer_5(graph):
        print("up:", line)
    for group in circles(graph):
        print("circle:", " <-> ".join(group))
