#!/usr/bin/env python3
"""The house's rules, checked from the tree (docs/design-notes.md, "The
house"); tests/it/tools/house.rs runs it.

- sizes: no file in src/, tests/, testbed/ or scripts/ over 600 lines; no
  function (Rust `fn`, Python `def`, shell function) over 100;
- imports: between the files of src/, no cycle; between the rooms (the
  top-level modules of src/), no cycle either, so every room sits on a
  floor above the rooms it imports and no import runs back up; no library
  room imports `cli` or `commands`, `cli` does not import `commands`, and
  no command imports another (only `commands/common.rs`);
- doubles: every outside-system trait of src/ (all but a shell word's
  quoting and an exit status) has an implementation in src/testing whose
  file plans faults (`Faults`: "fail the Nth call");
- commands: no file of src/commands over 150 lines, and none that builds
  a report by hand (`json!`), exits by itself (`ExitCode::from`,
  `process::exit`) or names an exit status but success (`Status::Drift`):
  reports are typed in the library, each owning its status, and `main`
  exits once;
- floors: at most MAX_FLOORS, so a new room is placed, not stacked;
- front doors: a folder's `mod.rs` holds its module list, re-exports and
  a map of its files, at most 100 lines of code; the flow lives in a file
  named for it;
- the crate's map: every module `lib.rs` declares is named in its map
  (its `//!` text);
- the tests' secret: `"hostkeys/hk"` is written once, in
  tests/it/common/mod.rs (`SECRET`); a test names the constant.

A room's front door (`mod.rs`, `lib.rs`) declaring and re-exporting its own
files is not an import. Prints one line per breach and exits 1, or prints
the floors and exits 0. `--root DIR` checks another tree (the test's
self-check).
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 100
SIZED = ("src", "tests", "testbed", "scripts")
# Outside the library: they may import anything.
ENTRY_ROOMS = {"main", "lambda_main", "commands", "cli", "testing", "parser_properties", "lib"}
FRONT_DOORS = {"mod.rs", "lib.rs", "main.rs"}

MAX_COMMAND_LINES = 150
MAX_FRONT_DOOR_CODE = 100
# A report built by hand, an exit of its own, or a status other than success
# named: a command prints what the library typed and returns its status.
HAND_MADE = re.compile(r"\bjson!|ExitCode::from|process::exit|\bStatus::(?!Success\b)\w+")
# The house stands on at most this many floors (13 since issue 58: the
# adapters implement ports their own floor owns, and the options the
# parser reads sit on the ground).
MAX_FLOORS = 13

RUST_FN = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?fn\s+(\w+)")
SHELL_FN = re.compile(r"^\s*(?:function\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*\(\)\s*\{?\s*$")
CRATE_PATH = re.compile(r"\b(crate|super|self|hostkeyctl)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE_BLOCK = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", re.M | re.S)


def strip_rust(text: str) -> str:
    """The code without comments and string or char literals (kept as
    blanks, so line numbers and braces stay where they were)."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = len(re.match(r"r(#*)", text[i:]).group(1))  # type: ignore[union-attr]
            end = '"' + "#" * hashes
            j = text.find(end, i + 2 + hashes)
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x[0-9a-fA-F]{2}'", text[i:]):
            m = re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x[0-9a-fA-F]{2}'", text[i:])
            out.append("' '")
            i += len(m.group(0))  # type: ignore[union-attr]
        else:
            out.append(c)
            i += 1
    return "".join(out)


def rust_functions(text: str) -> Iterator[tuple[str, int, int]]:
    """(name, first line, line count) of every `fn` with a body."""
    code = strip_rust(text).split("\n")
    for start, line in enumerate(code):
        m = RUST_FN.match(line)
        if not m:
            continue
        depth, opened = 0, False
        for end in range(start, len(code)):
            for ch in code[end]:
                if ch == "{":
                    depth, opened = depth + 1, True
                elif ch == "}":
                    depth -= 1
                elif ch == ";" and not opened and depth == 0:
                    break  # a declaration without a body
            else:
                if opened and depth == 0:
                    yield m.group(1), start + 1, end - start + 1
                    break
                continue
            break


def python_functions(text: str) -> Iterator[tuple[str, int, int]]:
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            end = node.end_lineno or node.lineno
            yield node.name, node.lineno, end - node.lineno + 1


def shell_functions(text: str) -> Iterator[tuple[str, int, int]]:
    lines = text.split("\n")
    for start, line in enumerate(lines):
        m = SHELL_FN.match(line)
        if not m:
            continue
        for end in range(start + 1, len(lines)):
            if lines[end].rstrip() == "}" and len(lines[end]) - len(lines[end].lstrip()) <= len(line) - len(
                line.lstrip()
            ):
                yield m.group(1), start + 1, end - start + 1
                break


def kind(path: Path) -> str | None:
    if path.suffix == ".rs":
        return "rust"
    if path.suffix == ".py":
        return "python"
    if path.suffix == ".sh":
        return "shell"
    try:
        first = path.read_text(errors="replace").split("\n", 1)[0]
    except OSError:
        return None
    if first.startswith("#!") and "python" in first:
        return "python"
    if first.startswith("#!") and ("sh" in first.split("/")[-1] or "bash" in first):
        return "shell"
    return None


def sources(root: Path) -> Iterator[tuple[Path, str]]:
    for top in SIZED:
        base = root / top
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            if path.is_file() and "fixtures" not in path.parts and "__pycache__" not in path.parts:
                k = kind(path)
                if k:
                    yield path, k


def check_sizes(root: Path) -> list[str]:
    breaches: list[str] = []
    functions = {"rust": rust_functions, "python": python_functions, "shell": shell_functions}
    for path, k in sources(root):
        text = path.read_text()
        rel = path.relative_to(root)
        lines = len(text.splitlines())
        if lines > MAX_FILE_LINES:
            breaches.append(f"{rel}: {lines} lines (at most {MAX_FILE_LINES}): split it by subject")
        for name, first, count in functions[k](text):
            if count > MAX_FUNCTION_LINES:
                breaches.append(
                    f"{rel}:{first}: {name} is {count} lines (at most {MAX_FUNCTION_LINES}): split it into steps"
                )
    return breaches


def module_of(src: Path, path: Path) -> tuple[str, ...]:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main") and (len(parts) > 1 or parts[-1] != "main"):
        parts = parts[:-1]
    return tuple(parts)


def file_of(modules: dict[tuple[str, ...], Path], path: tuple[str, ...]) -> Path | None:
    """The file of the longest module prefix of `path`."""
    for n in range(len(path), 0, -1):
        if path[:n] in modules:
            return modules[path[:n]]
    return None


def use_paths(tree: str) -> Iterator[str]:
    """`crate::a::{b, c::d}` -> crate::a::b, crate::a::c::d."""
    tree = re.sub(r"\s+", "", tree)

    def expand(prefix: str, rest: str) -> Iterator[str]:
        if "{" not in rest:
            yield prefix + rest
            return
        head, body = rest.split("{", 1)
        body = body[: body.rfind("}")]
        depth, part = 0, ""
        for ch in body + ",":
            if ch == "," and depth == 0:
                if part:
                    yield from expand(prefix + head, part)
                part = ""
                continue
            depth += (ch == "{") - (ch == "}")
            part += ch

    yield from expand("", tree)


def imports(src: Path) -> dict[Path, set[Path]]:
    files = sorted(p for p in src.rglob("*.rs"))
    modules = {module_of(src, p): p for p in files}
    modules[()] = src / "lib.rs"
    graph: dict[Path, set[Path]] = {}
    for path in files:
        here = module_of(src, path)
        # `super` in a mod.rs is its parent; in a leaf file, its folder.
        folder = here if path.name in FRONT_DOORS else here[:-1]
        code = strip_rust(path.read_text())
        code = code.split("#[cfg(test)]\nmod tests", 1)[0]
        found: set[str] = set()
        for m in USE_BLOCK.finditer(code):
            found.update(use_paths(m.group(1)))
        found.update(m.group(0) for m in CRATE_PATH.finditer(code))
        targets: set[Path] = set()
        for p in found:
            parts = [x for x in re.sub(r"\s+", "", p).split("::") if x]
            if not parts or parts[0] not in ("crate", "super", "self", "hostkeyctl"):
                continue
            # The binaries' entry points name the library by its name.
            if parts[0] in ("crate", "hostkeyctl"):
                base: tuple[str, ...] = ()
            elif parts[0] == "self":
                base = here
            else:
                base = folder[:-1] if path.name in FRONT_DOORS else folder
            rest = parts[1:]
            while rest and rest[0] == "super":
                base, rest = base[:-1], rest[1:]
            target = file_of(modules, base + tuple(rest))
            if target is None or target == path:
                continue
            # A front door declaring and re-exporting its own files.
            if path.name in ("mod.rs", "lib.rs") and target.is_relative_to(path.parent):
                continue
            targets.add(target)
        graph[path] = targets
    return graph


def room(src: Path, path: Path) -> str:
    parts = path.relative_to(src).with_suffix("").parts
    return parts[0]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
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
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def check_imports(root: Path) -> tuple[list[str], list[list[str]]]:
    src = root / "src"
    if not src.is_dir():
        return [], []
    graph = imports(src)
    rel = {p: str(p.relative_to(root)) for p in graph}
    breaches: list[str] = []
    files = {rel[a]: {rel[b] for b in bs if b in rel} for a, bs in graph.items()}
    for c in cycles(files):
        ties = [f"{a} -> {b}" for a in c for b in sorted(files[a]) if b in c]
        breaches.append(f"files import each other: {', '.join(ties)}")
    rooms: dict[str, set[str]] = {}
    for a, bs in graph.items():
        ra = room(src, a)
        for b in bs:
            rb = room(src, b)
            if rb != ra:
                rooms.setdefault(ra, set()).add(rb)
                if ra not in ENTRY_ROOMS and rb in ("cli", "commands"):
                    breaches.append(f"{rel[a]} imports {rel[b]}: the library does not reach into the command line")
                if ra == "cli" and rb == "commands":
                    breaches.append(f"{rel[a]} imports {rel[b]}: arguments do not run commands")
            elif ra == "commands" and a.name not in FRONT_DOORS and b.name not in ("common.rs", "mod.rs"):
                if a.parent == b.parent or not b.is_relative_to(a.parent):
                    if not (a.parent != src / "commands" and b.is_relative_to(a.parent)):
                        breaches.append(f"{rel[a]} imports {rel[b]}: no command imports another")
        rooms.setdefault(ra, set())
    for c in cycles(rooms):
        ties = []
        for a, bs in graph.items():
            ra = room(src, a)
            for b in bs:
                if ra in c and room(src, b) in c and room(src, b) != ra:
                    ties.append(f"{rel[a]} -> {rel[b]}")
        breaches.append(f"rooms import each other ({', '.join(c)}): {', '.join(sorted(ties))}")
    return breaches, floors(rooms)


def floors(rooms: dict[str, set[str]]) -> list[list[str]]:
    """Rooms by floor, from the ground up (rooms on a circle are left out)."""
    placed: dict[str, int] = {}
    left = dict(rooms)
    while left:
        ready = [r for r, deps in left.items() if all(d in placed or d not in rooms for d in deps)]
        if not ready:
            break
        for r in ready:
            placed[r] = 1 + max((placed.get(d, 0) for d in rooms[r]), default=0)
            del left[r]
    out: list[list[str]] = [[] for _ in range(max(placed.values(), default=0))]
    for r, f in placed.items():
        out[f - 1].append(r)
    return [sorted(f) for f in out]


# Traits that are no outside system: a shell word's quoting, an exit
# status. Every other trait in src/ is a seam to AWS, sshd or the network.
IN_PROCESS_TRAITS = {"Word", "ExitStatus"}
TRAIT = re.compile(r"^\s*pub(?:\([^)]*\))?\s+trait\s+(\w+)", re.M)
IMPL_FOR = re.compile(r"\bimpl\b[^{;]*?\b(\w+)(?:<[^{;]*?>)?\s+for\s+[^{;]+\{", re.S)
FAULTS_FILE = "src/testing/faults.rs"
FAULT_WORD = re.compile(r"\b(?:Faults|NodeFaults|Fault)\b")


def check_doubles(root: Path) -> list[str]:
    """Every outside-system trait of src/ has a double in src/testing, and
    the double's file plans faults (`Faults`, `Hooked`'s `Fault`,
    `NodeFaults`): "fail the Nth call" reaches every seam."""
    src = root / "src"
    testing = src / "testing"
    if not src.is_dir():
        return []
    traits: dict[str, Path] = {}
    for path in sorted(src.rglob("*.rs")):
        if testing in path.parents:
            continue
        for name in TRAIT.findall(strip_rust(path.read_text())):
            if name not in IN_PROCESS_TRAITS:
                traits.setdefault(name, path)
    doubles: dict[str, list[Path]] = {}
    for path in sorted(testing.rglob("*.rs")) if testing.is_dir() else []:
        for name in IMPL_FOR.findall(strip_rust(path.read_text())):
            doubles.setdefault(name, []).append(path)
    breaches = []
    for name, path in sorted(traits.items()):
        rel = path.relative_to(root)
        files = doubles.get(name, [])
        if not files:
            breaches.append(f"{rel}: trait {name} has no double in src/testing: add one with Faults ({FAULTS_FILE})")
        elif not any(FAULT_WORD.search(f.read_text()) for f in files):
            double = files[0].relative_to(root)
            breaches.append(f"{rel}: trait {name}'s double ({double}) plans no faults: give it Faults ({FAULTS_FILE})")
    return breaches


def code_lines(text: str) -> int:
    """Lines of a Rust file that hold code (comments, doc text and blank
    lines left out)."""
    return sum(1 for line in strip_rust(text).splitlines() if line.strip())


def check_commands(root: Path) -> list[str]:
    breaches: list[str] = []
    base = root / "src" / "commands"
    for path in sorted(base.rglob("*.rs")) if base.is_dir() else []:
        rel = path.relative_to(root)
        text = path.read_text()
        lines = len(text.splitlines())
        if lines > MAX_COMMAND_LINES:
            breaches.append(
                f"{rel}: {lines} lines (a command at most {MAX_COMMAND_LINES}): move its flow into the library"
            )
        for n, line in enumerate(strip_rust(text).splitlines(), 1):
            found = HAND_MADE.search(line)
            if found:
                breaches.append(
                    f"{rel}:{n}: {found.group(0)} in a command: type the report in the library,"
                    " and let the error own its exit status"
                )
    return breaches


def check_front_doors(root: Path) -> list[str]:
    src = root / "src"
    breaches: list[str] = []
    for path in sorted(src.rglob("mod.rs")) if src.is_dir() else []:
        lines = code_lines(path.read_text())
        if lines > MAX_FRONT_DOOR_CODE:
            breaches.append(
                f"{path.relative_to(root)}: {lines} lines of code (a front door at most {MAX_FRONT_DOOR_CODE}):"
                " move the flow into a file named for it"
            )
    return breaches


def check_crate_map(root: Path) -> list[str]:
    lib = root / "src" / "lib.rs"
    if not lib.is_file():
        return []
    text = lib.read_text()
    doc = "\n".join(line for line in text.splitlines() if line.lstrip().startswith("//!"))
    declared = re.findall(r"^\s*(?:#\[[^\]]*\]\s*)*pub\s+mod\s+(\w+)\s*;", strip_rust(text), re.M)
    return [
        f"src/lib.rs: module {name} is not in the crate's map (its //! text): say what it is for"
        for name in declared
        if not re.search(rf"`(?:crate::)?{name}(?:::[\w:]+)?`", doc)
    ]


TEST_SECRET = '"hostkeys/hk"'
TEST_SECRET_HOME = "tests/it/common/mod.rs"


def check_test_secret(root: Path) -> list[str]:
    breaches: list[str] = []
    base = root / "tests"
    for path in sorted(base.rglob("*.rs")) if base.is_dir() else []:
        rel = path.relative_to(root).as_posix()
        if rel == TEST_SECRET_HOME:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if TEST_SECRET in line:
                breaches.append(f"{rel}:{n}: {TEST_SECRET} written out: name crate::common::SECRET")
    return breaches


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args()
    root: Path = args.root.resolve()
    breaches = check_sizes(root)
    import_breaches, by_floor = check_imports(root)
    breaches += import_breaches
    if len(by_floor) > MAX_FLOORS:
        breaches.append(
            f"src: {len(by_floor)} floors (at most {MAX_FLOORS}): place the new room beside its peers,"
            " with the port it implements on the floor that owns it"
        )
    breaches += check_doubles(root)
    breaches += check_commands(root)
    breaches += check_front_doors(root)
    breaches += check_crate_map(root)
    breaches += check_test_secret(root)
    for b in breaches:
        print(b)
    if breaches:
        print(f"check_house: {len(breaches)} breach(es) of the house's rules (scripts/check_house.py)")
        return 1
    for n, rooms in reversed(list(enumerate(by_floor, 1))):
        print(f"floor {n:2}: {' '.join(rooms)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
