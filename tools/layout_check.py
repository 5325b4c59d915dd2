#!/usr/bin/env python3
"""Layout checks of the crate (run by tools/test.sh):

1. No import cycle between sibling modules. Every path a file names (`use crate::a::b`,
   `crate::a::b::X`, `super::x`, `self::x`) is resolved to the module file it reaches; an
   edge between two files counts between the two children of their lowest common module
   (a parent naming its own child, or a child its parent, is no edge). A cycle among the
   children of any module is reported with the file-level references behind it.
2. No source file over MAX_LINES lines (`--max-lines`, default 800).

    tools/layout_check.py [--max-lines N] [--verbose]
"""

import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"


def module_of(path: Path):
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "mod":
        parts.pop()
    if parts in (["lib"], ["main"]):
        return ()
    return tuple(parts)


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//")[0] for line in text.splitlines())


def use_paths(text: str):
    """Yields every path of `use` trees and inline `crate::` / `super::` / `self::` paths."""
    for m in re.finditer(r"\buse\s+([^;]+);", text):
        yield from expand(m.group(1).replace("\n", " ").replace(" ", ""))
    for m in re.finditer(r"\b((?:crate|super|self)(?:::\w+)+)", text):
        yield m.group(1).split("::")


def expand(tree: str, prefix=()):
    """Expands a use tree `a::{b, c::{d}}` into paths."""
    i = tree.find("{")
    if i < 0:
        yield [*prefix, *[p for p in tree.split("::") if p and not p.startswith("as")]]
        return
    head = [p for p in tree[:i].split("::") if p]
    body = tree[i + 1: tree.rfind("}")]
    depth, start = 0, 0
    for j, ch in enumerate(body + ","):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            part = body[start:j].strip()
            start = j + 1
            if part:
                yield from expand(part, (*prefix, *head))


def main():
    max_lines = 800
    verbose = "--verbose" in sys.argv
    if "--max-lines" in sys.argv:
        max_lines = int(sys.argv[sys.argv.index("--max-lines") + 1])
    files = {module_of(p): p for p in SRC.rglob("*.rs") if p.name != "main.rs"}
    # Files of #[path]-less inline test modules (e.g. `mod tests;` in foo.rs -> foo/tests.rs)
    # are modules like any other.
    modules = set(files)
    edges = defaultdict(set)  # (mod_a, mod_b) -> examples
    for mod, path in files.items():
        text = strip_comments(path.read_text())
        for raw in use_paths(text):
            if not raw:
                continue
            if raw[0] == "crate":
                target = list(raw[1:])
            elif raw[0] in ("super", "self"):
                base = list(mod)
                # A mod.rs's `self` is its module; a leaf file's `super` is its parent.
                k = 0
                while k < len(raw) and raw[k] in ("super", "self"):
                    if raw[k] == "super":
                        base = base[:-1]
                    k += 1
                target = base + list(raw[k:])
            else:
                continue
            # The longest prefix that is a module.
            while target and tuple(target) not in modules:
                target.pop()
            tgt = tuple(target)
            if not tgt or tgt == mod:
                continue
            # Lowest common ancestor; the edge is between its children.
            n = 0
            while n < min(len(mod), len(tgt)) and mod[n] == tgt[n]:
                n += 1
            if n == len(mod) or n == len(tgt):
                continue  # ancestor <-> descendant
            a, b = mod[: n + 1], tgt[: n + 1]
            edges[(a, b)].add(f"{path.relative_to(ROOT)} -> {'::'.join(raw)}")
    graph = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    # Strongly connected components (Tarjan).
    index, low, stack, on, sccs = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(comp)

    sys.setrecursionlimit(10000)
    for v in list(graph):
        if v not in index:
            visit(v)
    bad = 0
    for comp in sccs:
        bad += 1
        names = sorted("::".join(c) for c in comp)
        print(f"layout: import cycle between {', '.join(names)}")
        for a in comp:
            for b in comp:
                if (a, b) in edges:
                    ex = sorted(edges[(a, b)])
                    shown = ex if verbose else ex[:3]
                    for e in shown:
                        print(f"    {e}")
                    if len(ex) > len(shown):
                        print(f"    ... {len(ex) - len(shown)} more")
    long = []
    for p in sorted(SRC.rglob("*.rs")):
        n = sum(1 for _ in p.open())
        if n > max_lines:
            long.append((p, n))
    for p, n in long:
        print(f"layout: {p.relative_to(ROOT)} has {n} lines (over {max_lines})")
    if bad or long:
        sys.exit(1)
    print(f"layout: {len(files)} modules, no import cycle, no file over {max_lines} lines")


if __name__ == "__main__":
    main()
