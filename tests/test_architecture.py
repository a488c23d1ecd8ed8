"""ARCHITECTURE.md's map holds: every import of ours goes along an arrow the map draws.

The map is read from ARCHITECTURE.md itself and each Python file's imports with `ast`: nothing
is imported or run, so this takes well under a second.
"""

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MAP_FILE = REPO / "ARCHITECTURE.md"


@dataclass(frozen=True)
class Room:
    name: str
    modules: tuple[str, ...]  # module prefixes
    may_import: tuple[str, ...]  # room names, or "`module`" for one module of another room
    never_imports: tuple[str, ...]  # libraries


@dataclass(frozen=True)
class Import:
    importer: str
    target: str
    path: Path
    line: int
    function: str | None  # the innermost function it is written in, if any


def read_map(text: str) -> tuple[list[Room], set[tuple[str, str]]]:
    """The rooms of the map's table, and the arrows still to remove (importer, target)."""
    section = text.split("## The map", 1)[1].split("\n## ", 1)[0]
    rooms = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[1].startswith("`"):
            continue
        name, modules, may_import, never = cells
        rooms.append(Room(name, tuple(_quoted(modules)),
                          tuple(item.strip() for item in may_import.split(",") if item.strip()),
                          tuple(_quoted(never))))
    still = section.split("### Arrows still to remove", 1)[1]
    arrows = set(re.findall(r"^- `([\w.]+)` -> `([\w.]+)`", still, re.MULTILINE))
    return rooms, arrows


def _quoted(cell: str) -> list[str]:
    return re.findall(r"`([\w.]+)`", cell)


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


class Map:
    def __init__(self, rooms: list[Room]):
        self.rooms = {room.name: room for room in rooms}
        self._by_prefix = sorted(((prefix, room) for room in rooms for prefix in room.modules),
                                 key=lambda entry: -len(entry[0]))

    def room_of(self, module: str) -> Room | None:
        return next((room for prefix, room in self._by_prefix if _within(module, prefix)), None)

    def allows(self, importer: Room, target: str) -> bool:
        target_room = self.room_of(target)
        if target_room is importer or "everything" in importer.may_import:
            return True
        return any(_within(target, allowed.strip("`")) if allowed.startswith("`")
                   else target_room is not None and target_room is self.rooms.get(allowed)
                   for allowed in importer.may_import)


def our_packages(repo: Path) -> list[str]:
    return sorted(path.parent.name for path in repo.glob("*/__init__.py"))


def module_name(path: Path, repo: Path) -> str:
    """Its dotted name; a package's own file is `package.__init__`, so that it has a room of its own."""
    return ".".join(path.relative_to(repo).with_suffix("").parts)


def imports_in(path: Path, repo: Path, ours: set[str]) -> list[Import]:
    """Every import in the file, relative ones resolved; `from p import m` names the module p.m."""
    module = module_name(path, repo)
    package = module.rsplit(".", 1)[0]
    found = []

    def visit(node, function: str | None):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            if isinstance(child, ast.Import):
                found.extend(Import(module, alias.name, path, child.lineno, function) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")[:len(package.split(".")) - (child.level - 1)]
                    base = ".".join(parts + ([child.module] if child.module else []))
                for alias in child.names:
                    candidate = f"{base}.{alias.name}"
                    is_module = base.split(".")[0] in ours and _exists(candidate, repo)
                    found.append(Import(module, candidate if is_module else base, path, child.lineno, function))
            visit(child, inner)

    visit(ast.parse(path.read_text(), str(path)), None)
    return found


def _exists(module: str, repo: Path) -> bool:
    path = repo.joinpath(*module.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def as_target(module: str, repo: Path) -> str:
    """An imported package is its `__init__`."""
    return f"{module}.__init__" if (repo.joinpath(*module.split(".")) / "__init__.py").exists() else module


@functools.cache
def all_imports(repo: Path) -> list[Import]:
    ours = set(our_packages(repo))
    return [found for package in sorted(ours) for path in sorted((repo / package).rglob("*.py"))
            for found in imports_in(path, repo, ours)]


def forbidden_imports(repo: Path, text: str) -> list[str]:
    """Each import the map does not allow, as 'file:line: importer -> target (why)'."""
    rooms, still_to_remove = read_map(text)
    house = Map(rooms)
    ours = set(our_packages(repo))
    problems = [f"{package}/ is in no room of the map" for package in sorted(ours) if house.room_of(package) is None]
    problems += [f"the {room.name} room may import {allowed!r}, which is no room of the map"
                 for room in rooms for allowed in room.may_import
                 if not allowed.startswith("`") and allowed != "everything" and allowed not in house.rooms]
    seen_still = set()
    for found in all_imports(repo):
        importer = house.room_of(found.importer)
        if importer is None:
            continue
        where = f"{found.path.relative_to(repo)}:{found.line}: {found.importer} -> {found.target}"
        library = found.target.split(".")[0]
        if library not in ours:
            if any(_within(found.target, never) for never in importer.never_imports):
                problems.append(f"{where} (the {importer.name} room never imports {library})")
            continue
        if house.allows(importer, as_target(found.target, repo)):
            continue
        arrow = next(((a, b) for a, b in still_to_remove
                      if _within(found.importer, a) and _within(found.target, b)), None)
        if arrow is not None:
            seen_still.add(arrow)
            continue
        target = house.room_of(as_target(found.target, repo))
        problems.append(f"{where} ({importer.name} may not import {target.name if target else 'it'})")
    problems += [f"{a} -> {b} is listed under 'Arrows still to remove' but no longer made: remove the line"
                 for a, b in sorted(still_to_remove - seen_still)]
    return problems


def imports_inside_functions(repo: Path, package: str) -> list[str]:
    """Imports of the package's own modules written inside a function, but for an AppConfig's
    `ready()` in apps.py: Django's place for what needs the app registry loaded first."""
    return [f"{found.path.relative_to(repo)}:{found.line}: {found.importer} imports {found.target} inside a function"
            for found in all_imports(repo)
            if found.function is not None and _within(found.importer, package)
            and found.target.split(".")[0] == package
            and not (found.importer.endswith(".apps") and found.function == "ready")]


def import_cycles(repo: Path) -> list[list[str]]:
    """Modules of ours that import each other, directly or around a loop, at import time."""
    ours = set(our_packages(repo)) - {"tests"}
    graph: dict[str, set[str]] = {}
    for found in all_imports(repo):
        if found.importer.split(".")[0] in ours and found.function is None and found.target.split(".")[0] in ours:
            graph.setdefault(found.importer, set()).add(as_target(found.target, repo))
    return [component for component in _strongly_connected(graph) if len(component) > 1]


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative."""
    index, low, on_stack, stack, components, counter = {}, {}, set(), [], [], 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph.get(root, ())))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph.get(child, ()))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def test_every_import_between_rooms_is_an_arrow_of_the_map():
    problems = forbidden_imports(REPO, MAP_FILE.read_text())
    assert not problems, "\n".join(["imports ARCHITECTURE.md does not allow:", *problems])


def test_no_module_of_ours_imports_itself_around_a_loop():
    cycles = import_cycles(REPO)
    assert not cycles, "\n".join(["import cycles (move the shared piece down):", *map(" <-> ".join, cycles)])


def test_no_import_in_chatapp_hides_inside_a_function():
    hidden = imports_inside_functions(REPO, "chatapp")
    assert not hidden, "\n".join(["imports inside functions (a hidden cycle: move the shared piece down):", *hidden])


# The checker itself, on a house of three files: each rule it enforces fails when broken.
SMALL_MAP = """
## The map
| Room | Modules | May import | Never imports |
|---|---|---|---|
| low | `pkg.low` | | `torch` |
| high | `pkg` | low | |

### Arrows still to remove
- `pkg.low.legacy` -> `pkg.high`
"""


def small_house(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, source in {"pkg/__init__.py": "", "pkg/low/__init__.py": "", "pkg/high.py": "",
                         "pkg/low/legacy.py": "from pkg import high\n", **files}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(source)
    return tmp_path


def test_an_import_up_against_the_arrows_is_named_with_its_file_and_line(tmp_path):
    repo = small_house(tmp_path, {"pkg/low/util.py": "import os\n\nfrom .. import high\n"})

    assert forbidden_imports(repo, SMALL_MAP) == [
        "pkg/low/util.py:3: pkg.low.util -> pkg.high (low may not import high)"]


def test_an_import_along_the_arrows_and_a_listed_one_pass(tmp_path):
    repo = small_house(tmp_path, {"pkg/high.py": "from pkg.low import legacy\nfrom .low import util\n",
                                  "pkg/low/util.py": "from . import legacy\n"})

    assert forbidden_imports(repo, SMALL_MAP) == []


def test_a_library_the_room_never_imports_and_an_arrow_no_longer_made_are_refused(tmp_path):
    repo = small_house(tmp_path, {"pkg/low/legacy.py": "import torch.nn\n"})

    assert forbidden_imports(repo, SMALL_MAP) == [
        "pkg/low/legacy.py:1: pkg.low.legacy -> torch.nn (the low room never imports torch)",
        "pkg.low.legacy -> pkg.high is listed under 'Arrows still to remove' but no longer made: remove the line"]


def test_a_package_on_no_map_is_refused(tmp_path):
    repo = small_house(tmp_path, {"other/__init__.py": ""})

    assert forbidden_imports(repo, SMALL_MAP) == ["other/ is in no room of the map"]


def test_a_cycle_and_an_import_inside_a_function_are_found(tmp_path):
    repo = small_house(tmp_path, {"pkg/a.py": "from . import b\n",
                                  "pkg/b.py": "def late():\n    from . import c\n\nfrom pkg import a\n",
                                  "pkg/c.py": "from . import b\n",
                                  "pkg/apps.py": "class Config:\n    def ready(self):\n        from . import c\n"})

    assert import_cycles(repo) == [["pkg.a", "pkg.b"]]
    assert imports_inside_functions(repo, "pkg") == ["pkg/b.py:2: pkg.b imports pkg.c inside a function"]
