"""The source tree keeps its interfaces: no module reaches into another's private names, and
the model's modules import one another in one direction only.

What counts as *across modules* (checked on the AST of every file under ``flyviz/``):

- a private name is one that starts with ``_`` and is not a dunder (``_x``, not ``__version__``);
- importing a private name (``from flyviz.a.b import _x``), or reading one off another
  flyviz module (``b._x`` where ``b`` names the module ``flyviz.a.b``), from a module file
  other than the one that defines it is across modules;
- a private *module* ``P._m`` (a file or package whose name starts with ``_``) may be
  imported only by modules of its own package ``P`` (``P/__init__.py``, its siblings, and
  the modules of P's sub-packages): ``flyviz/analysis/_kernels.py`` is for
  ``flyviz/analysis/*``, ``flyviz/commands/_options.py`` for the commands,
  ``flyviz/_version.py`` for all of ``flyviz``; from anywhere else it is across modules;
- a feature of the app (a module of ``flyviz/app`` with ``install(host)``) reaches the window
  only through the members of :class:`~flyviz.app.base.host.WindowHost` (``host.x`` or
  ``self.host.x``), never with ``getattr``/``hasattr``/``setattr`` on the host or the window;
  the protocol has at most :data:`MOST_HOST_MEMBERS` members and none is one of flyviz's
  widgets (features talk to the state, background calls, actions, docks and messages);
- reading (or writing) a private attribute of another module's objects (``recording._infos``
  in the codec) is across modules too, with the dot or by name (``getattr(recording,
  "_source")``, ``hasattr``, ``setattr``, ``delattr``). That one is found by a heuristic:
  an attribute ``_x`` used off anything but ``self``, ``cls`` or ``super()``

  - in a module that defines no ``_x`` itself (as a class's method or attribute, or
    ``self._x = ...``), whoever defines it: another flyviz module, or another library
    (``sys._getframe``);
  - or off a name the module annotates with another flyviz module's class
    (``self.highlights: Highlights``, ``rec: Recording``), even where the module has an
    ``_x`` of its own.

  Other libraries' privates that flyviz uses on purpose are listed one by one, each with
  its reason, in :data:`FOREIGN_PRIVATES`; :mod:`flyviz.render.vispy_compat` is the one
  module left out whole: every private attribute it reads is vispy's, on purpose, and the
  rest of flyviz reaches vispy's privates through it.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parent.parent / "flyviz"
#: The one module that reads vispy's private attributes, by design (see its docstring).
READS_THIRD_PARTY_PRIVATES = {"flyviz.render.vispy_compat"}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _modules() -> dict[str, Path]:
    """Every module of the source tree by its dotted name (a package by its own name)."""
    out = {}
    for path in sorted(SOURCE.rglob("*.py")):
        parts = list(path.relative_to(SOURCE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


class _Trees(dict):
    """Each module's syntax tree by its dotted name, parsed when first asked for: every test
    worker imports this file to collect it, and parsing the whole tree takes seconds."""

    def _fill(self) -> None:
        for name in MODULES.keys() - self.keys():
            self[name]                                  # noqa: B018 - parses it

    def __missing__(self, name: str) -> ast.Module:
        path = MODULES[name]
        tree = self[name] = ast.parse(path.read_text(encoding="utf-8"), str(path))
        return tree

    def items(self):  # type: ignore[override]
        self._fill()
        return super().items()


MODULES = _modules()
TREES = _Trees()


def _package(module: str) -> str:
    """The package a module belongs to (a package's ``__init__`` belongs to itself)."""
    return module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]


def _absolute(module: str, node: ast.ImportFrom) -> str:
    """The absolute module an ``import from`` names (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    base = _package(module).split(".")
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str, tree: ast.AST) -> list[tuple[int, str, str | None]]:
    """``(line, module imported, name imported from it or None)`` for every import in
    ``tree``, at any depth; a name that is itself a module is reported as that module."""
    out: list[tuple[int, str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _absolute(module, node)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.append((node.lineno, sub, None) if sub in MODULES
                           else (node.lineno, target, alias.name))
    return [item for item in out if item[1] == "flyviz" or item[1].startswith("flyviz.")]


def _private_module_owner(target: str) -> str | None:
    """The package a private module of ``target``'s path belongs to (``flyviz.a`` for
    ``flyviz.a._m`` or ``flyviz.a._m.x``), or ``None`` when no part is private."""
    parts = target.split(".")
    for i, part in enumerate(parts[1:], start=1):
        if _private(part):
            return ".".join(parts[:i])
    return None


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def cross_module_private_imports() -> list[str]:
    """Every import of a private name or module that crosses a module (see the docstring)."""
    found = []
    for module, tree in TREES.items():
        where = MODULES[module].relative_to(SOURCE.parent)
        module_names: dict[str, str] = {}   # local names bound to flyviz modules
        for line, target, name in _imports(module, tree):
            owner = _private_module_owner(target)
            if owner is not None and not _inside(module, owner):
                found.append(f"{where}:{line}: imports the private module {target} from "
                             f"outside {owner}")
            if name is not None and _private(name) and target != module:
                found.append(f"{where}:{line}: imports {name} from {target}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and alias.name in MODULES:
                        module_names[alias.asname] = alias.name
            elif isinstance(node, ast.ImportFrom):
                target = _absolute(module, node)
                for alias in node.names:
                    if f"{target}.{alias.name}" in MODULES:
                        module_names[alias.asname or alias.name] = f"{target}.{alias.name}"
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _private(node.attr)):
                continue
            dotted = ast.unparse(node.value)
            target = module_names.get(dotted, dotted)
            if target in MODULES and target != module:
                found.append(f"{where}:{node.lineno}: reads {node.attr} of the module {target}")
    return found


def _private_attributes(tree: ast.AST) -> set[str]:
    """The private attribute names a module's classes define: methods, class attributes,
    and ``self._x = ...`` / ``cls._x = ...`` assignments."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(item.name)
                elif isinstance(item, ast.Assign):
                    names.update(t.id for t in item.targets if isinstance(t, ast.Name))
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(item.target.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            names.add(node.attr)
    return {name for name in names if _private(name)}


#: The functions that read, write or test an attribute named by a string: ``getattr(rec,
#: "_source", None)`` reads ``rec._source`` as surely as the dot does.
ATTRIBUTE_FUNCTIONS = ("getattr", "hasattr", "setattr", "delattr")


def _attribute_uses(tree: ast.AST) -> list[tuple[int, ast.AST, str, str]]:
    """``(line, receiver, attribute, code)`` for every private attribute ``tree`` reads or
    writes off an object: ``x._a`` and ``getattr(x, "_a")`` (``hasattr``, ``setattr``,
    ``delattr`` too)."""
    uses: list[tuple[int, ast.AST, str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            uses.append((node.lineno, node.value, node.attr, ast.unparse(node)))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ATTRIBUTE_FUNCTIONS and len(node.args) >= 2 \
                and isinstance(node.args[1], ast.Constant) \
                and isinstance(node.args[1].value, str) and _private(node.args[1].value):
            uses.append((node.lineno, node.args[0], node.args[1].value, ast.unparse(node)))
    return uses


def _own_receiver(value: ast.AST) -> bool:
    """``self``, ``cls`` or ``super()``: the object of the class being written."""
    if isinstance(value, ast.Name):
        return value.id in ("self", "cls")
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) \
        and value.func.id == "super"


def _classes(tree: ast.AST) -> frozenset[str]:
    """The names of the classes ``tree`` defines, walked once per tree: every import of a
    flyviz name asks for the classes of the module it comes from (thousands of walks of the
    same trees took most of the private-attribute check's seconds)."""
    found = _CLASSES.get(id(tree))
    if found is None or found[0] is not tree:      # an id reused by a newer tree: walk it
        names = frozenset(node.name for node in ast.walk(tree)
                          if isinstance(node, ast.ClassDef))
        found = _CLASSES[id(tree)] = (tree, names)
    return found[1]


#: ``id(tree) -> (tree, class names)``: the tree is kept so that its id is not reused.
_CLASSES: dict[int, tuple[ast.AST, frozenset[str]]] = {}


def _annotated_classes(module: str, tree: ast.AST) -> dict[str, set[tuple[str, str]]]:
    """``receiver -> {(module, class)}``: the flyviz classes ``tree`` annotates a name with
    (a parameter ``rec: Recording``, ``self.highlights: Highlights | None``, ``x: T = ...``),
    each class found where the module imports it from or in the module itself."""
    imported: dict[str, tuple[str, str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = _absolute(module, node)
            for alias in node.names:
                if target in MODULES and alias.name in _classes(TREES[target]):
                    imported[alias.asname or alias.name] = (target, alias.name)
    own = {name: (module, name) for name in _classes(tree)}

    def named(annotation: ast.AST | None) -> set[tuple[str, str]]:
        if annotation is None:
            return set()
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            try:
                annotation = ast.parse(annotation.value, mode="eval")
            except SyntaxError:
                return set()
        found = set()
        for node in ast.walk(annotation):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found |= named(node)
            elif isinstance(node, ast.Name) and node.id in (imported.keys() | own.keys()):
                found.add(imported.get(node.id) or own[node.id])
        return found

    out: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            out[node.arg] |= named(node.annotation)
        elif isinstance(node, ast.AnnAssign):
            out[ast.unparse(node.target)] |= named(node.annotation)
    return out


#: Private attributes of other libraries' objects that flyviz reads on purpose, each with
#: why, by ``(module, attribute)``; anything else read off a foreign object is a finding.
#: (:data:`READS_THIRD_PARTY_PRIVATES` names the vispy shim, whose every read is vispy's.)
FOREIGN_PRIVATES: dict[tuple[str, str], str] = {
    ("flyviz.resources", "_MEIPASS"):
        "PyInstaller's documented path of an unpacked bundle (sys._MEIPASS)",
    ("flyviz.runs", "_register_atexit"):
        "CPython's threading exit hook, the one that runs before concurrent.futures' "
        "(see flyviz.runs' docstring); it is looked up with getattr and its absence handled",
    ("flyviz.cli", "_actions"):
        "argparse offers no public list of a parser's actions (to type its Path options)",
    ("flyviz.cli", "_module"):
        "an argparse default flyviz.cli sets itself (set_defaults(_module=...)) and reads back",
    ("flyviz.app.base.gc_policy", "_flyviz_gc"):
        "flyviz's own collector, kept on the QApplication it collects for and read back "
        "here only",
    ("flyviz.app.population.plot_axes", "_repaint_on_input"):
        "flyviz's own event filter, kept on the Qt plot it filters for so that it lives as "
        "long as the plot; never read",
}


def cross_module_private_attributes() -> list[str]:
    """Private attributes read (or written) off another module's objects (the heuristic of
    the module docstring)."""
    defined = {module: _private_attributes(tree) for module, tree in TREES.items()}
    owners: dict[str, set[str]] = defaultdict(set)
    for module, names in defined.items():
        for name in names:
            owners[name].add(module)
    found = []
    for module, tree in TREES.items():
        if module in READS_THIRD_PARTY_PRIVATES:
            continue
        where = MODULES[module].relative_to(SOURCE.parent)
        annotated = _annotated_classes(module, tree)
        for line, value, attr, code in _attribute_uses(tree):
            if _own_receiver(value) or (module, attr) in FOREIGN_PRIVATES:
                continue
            classes = annotated.get(ast.unparse(value), set())
            elsewhere = sorted({m for m, _cls in classes if m != module})
            if elsewhere and len(elsewhere) == len({m for m, _cls in classes}):
                # The object is annotated with another module's class: its privates are
                # that module's even where this module has a private of the same name.
                found.append(f"{where}:{line}: {code} is private to {', '.join(elsewhere)}")
            elif attr not in defined[module]:
                others = sorted(owners.get(attr, set()) - {module})
                owner = ", ".join(others) if others else "another library (see FOREIGN_PRIVATES)"
                found.append(f"{where}:{line}: {code} is private to {owner}")
    return found


def _top_level_imports(module: str) -> set[str]:
    """The flyviz modules ``module`` imports when it is imported: its module-level import
    statements (inside ``if``/``try`` too, but not under ``if TYPE_CHECKING:``), not the
    imports inside its functions, which run on use."""
    targets: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If):
                if "TYPE_CHECKING" not in ast.unparse(node.test):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                for part in (node.body, node.orelse, node.finalbody,
                             *(handler.body for handler in node.handlers)):
                    visit(part)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for _line, target, _name in _imports(module, ast.Module([node], [])):
                    while target not in MODULES and "." in target:
                        target = target.rpartition(".")[0]
                    targets.add(target)

    visit(TREES[module].body)
    targets.discard(module)
    return targets


def import_cycles(package: str) -> list[list[str]]:
    """The cycles among ``package``'s modules in the graph of their module-level imports.

    The package's own ``__init__`` is left out: it imports its modules to re-export their
    names, after them, which is no cycle between the modules themselves.
    """
    members = {m for m in MODULES if _inside(m, package) and m != package}
    graph = {m: {t for t in _top_level_imports(m) if t in members} for m in members}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}   # 1: on the path, 2: done
    path: list[str] = []

    def walk(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                walk(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(members):
        if node not in state:
            walk(node)
    return cycles


def _run_time_imports(module: str) -> set[str]:
    """The flyviz modules ``module`` may import while the program runs: every import
    statement at any depth (inside functions and methods too: a lazy import runs on use),
    but none under ``if TYPE_CHECKING:``, which never runs."""
    targets: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for stmt in child.orelse:
                    visit(ast.Module([stmt], []))
            elif isinstance(child, (ast.Import, ast.ImportFrom)):
                for _line, target, _name in _imports(module, ast.Module([child], [])):
                    while target not in MODULES and "." in target:
                        target = target.rpartition(".")[0]
                    targets.add(target)
            else:
                visit(child)

    visit(TREES[module])
    targets.discard(module)
    return targets


def run_time_import_graph() -> dict[str, set[str]]:
    """Each flyviz module and the flyviz modules it imports at run time, lazy imports included.

    A package stands for its ``__init__``: ``from flyviz.record import Recording`` is an arrow
    to ``flyviz.record``, which imports its own modules in turn.
    """
    return {module: {t for t in _run_time_imports(module) if t in MODULES} for module in MODULES}


def run_time_import_circles(graph: dict[str, set[str]] | None = None) -> list[tuple[str, ...]]:
    """The modules of each import circle (each strongly connected set of two or more modules
    of the run-time import graph), each sorted, the circles in order."""
    graph = run_time_import_graph() if graph is None else graph
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[tuple[str, ...]] = []
    for root in sorted(graph):
        if root in order:
            continue
        # Tarjan's algorithm without recursion: the graph is deep enough to matter.
        work = [(root, iter(sorted(graph[root])))]
        order[root] = low[root] = len(order)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in graph:
                    continue
                if target not in order:
                    order[target] = low[target] = len(order)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], order[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == order[node]:
                    members = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        members.append(member)
                        if member == node:
                            break
                    if len(members) > 1:
                        circles.append(tuple(sorted(members)))
    return sorted(circles)


#: The import circles still to be cut, each listed with all its modules: the test asks for
#: exactly these, so a circle that grows (a new upward arrow into it) fails as a new one does,
#: and a circle that is cut must be taken off this list. None is left: the last one ran
#: inside the model (the engine resolves the interventions it is given, and resolving a patch
#: whose source is a prompt runs that prompt on an engine); the prompt now runs on the
#: engine's core (flyviz.model.engine_core), which resolves nothing, below both.
KNOWN_IMPORT_CIRCLES: set[tuple[str, ...]] = set()


#: The arrows from the model and the recordings up to a layer above them still to be cut:
#: the Fly LLM's own model object and its replay start their runs through flyviz.runs.Run,
#: the one place that steps a run (``Model.record``, ``replay_recording``; docs/runs.md).
#: Neither closes a circle: flyviz.runs reaches the kinds and the viewer state, and neither
#: of them imports the runner or the replay.
KNOWN_UPWARD_IMPORTS = {
    "flyviz.record.replay -> flyviz.runs",
    "flyviz.record.runner -> flyviz.runs",
}


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every run-time arrow from ``flyviz.model``/``flyviz.record`` to a layer above them."""
    upper = ("flyviz.kinds", "flyviz.render", "flyviz.app", "flyviz.viewer", "flyviz.runs")
    return sorted(f"{module} -> {target}" for module, targets in graph.items()
                  if _inside(module, "flyviz.model") or _inside(module, "flyviz.record")
                  for target in targets if any(_inside(target, up) for up in upper))


# --------------------------------------------------------------------- the window host
#: The most members :class:`~flyviz.app.base.host.WindowHost` may have.
MOST_HOST_MEMBERS = 10
#: Parts of the window that are no widget but that features must not drive either: the
#: playback (the state's shown token is the bus).
WINDOW_PARTS = {"RunController", "Session"}
#: The names a feature module calls the window by.
WINDOW_NAMES = {"host", "window", "win"}


def host_members(tree: ast.Module) -> dict[str, str]:
    """The ``WindowHost`` protocol's members in ``tree`` (host.py) and their annotations
    (a method's: its return type)."""
    protocol = next(node for node in tree.body
                    if isinstance(node, ast.ClassDef) and node.name == "WindowHost")
    members: dict[str, str] = {}
    for node in protocol.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            members[node.target.id] = ast.unparse(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            members[node.name] = ast.unparse(node.returns) if node.returns else ""
    return members


def host_annotation_classes(tree: ast.Module) -> dict[str, tuple[str, str]]:
    """``member -> (module, class)`` for each member annotated with a flyviz class (the
    names the protocol imports from flyviz modules)."""
    imported = {alias.asname or alias.name: (node.module, alias.name)
                for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
                for alias in node.names}
    out = {}
    for member, annotation in host_members(tree).items():
        for name in (n.id for n in ast.walk(ast.parse(annotation.strip("'\""), mode="eval"))
                     if isinstance(n, ast.Name)):
            module, cls = imported.get(name, ("", ""))
            if module.startswith("flyviz."):
                out[member] = (module, cls)
    return out


def _is_window(node: ast.AST) -> bool:
    """``host``, ``window``, ``self.host``, ``self.window``..."""
    if isinstance(node, ast.Name):
        return node.id in WINDOW_NAMES
    return isinstance(node, ast.Attribute) and node.attr in WINDOW_NAMES \
        and isinstance(node.value, ast.Name) and node.value.id == "self"


def feature_modules() -> list[str]:
    """The app's feature modules: those of ``flyviz.app`` with an ``install(host)``."""
    return sorted(name for name, tree in TREES.items() if name.startswith("flyviz.app.")
                  and any(isinstance(node, ast.FunctionDef) and node.name == "install"
                          and [a.arg for a in node.args.args] == ["host"] for node in tree.body))


def host_reach_ins(members: set[str]) -> list[str]:
    """Where a feature module reads ``host.x`` for an ``x`` the protocol does not name, or
    calls ``getattr``/``hasattr``/``setattr`` on the host or the window."""
    found = []
    for module in feature_modules():
        rel = MODULES[module].relative_to(SOURCE.parent)
        for node in ast.walk(TREES[module]):
            if isinstance(node, ast.Attribute) and ast.unparse(node.value) in ("host", "self.host") \
                    and node.attr not in members:
                found.append(f"{rel}:{node.lineno}: {ast.unparse(node)} is not a WindowHost member")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("getattr", "hasattr", "setattr") and node.args \
                    and _is_window(node.args[0]):
                found.append(f"{rel}:{node.lineno}: {node.func.id} on {ast.unparse(node.args[0])}")
    return found


# --------------------------------------------------------------------- tests
def test_no_module_imports_another_modules_private_names():
    assert cross_module_private_imports() == []


def test_no_module_reads_the_private_attributes_of_another_modules_objects():
    assert cross_module_private_attributes() == []


def test_the_model_modules_import_one_another_without_a_cycle():
    assert import_cycles("flyviz.model") == []


def test_no_new_import_circle_at_run_time_lazy_imports_included():
    """Every import circle found is one of the known ones, module for module: a new circle,
    a known one that grew, or one that was cut but is back all fail here."""
    circles = set(run_time_import_circles())
    new = [" -> ".join(circle) for circle in sorted(circles - KNOWN_IMPORT_CIRCLES)]
    cut = [" -> ".join(circle) for circle in sorted(KNOWN_IMPORT_CIRCLES - circles)]
    assert new == [], "import circles at run time (their modules):\n" + "\n".join(new)
    assert cut == [], "cut, take them off KNOWN_IMPORT_CIRCLES:\n" + "\n".join(cut)


def test_the_model_and_the_recordings_import_nothing_above_them():
    # Not even lazily: flyviz.model and flyviz.record sit under the kinds, the viewer,
    # the renderers, the runs and the app.
    assert set(upward_imports(run_time_import_graph())) <= KNOWN_UPWARD_IMPORTS


def test_the_run_time_import_check_finds_a_planted_circle():
    code = {
        # a top-level arrow one way, a lazy one back: a circle at run time
        "flyviz.model.fake_low": "from flyviz.model import fake_mid\n",
        "flyviz.model.fake_mid": "def f():\n    from flyviz.viewer import fake_high\n",
        "flyviz.viewer.fake_high": "import flyviz.model.fake_low\n",
        # an arrow back only for the type checker is none
        "flyviz.model.fake_typed": "from typing import TYPE_CHECKING\n"
                                   "from flyviz.model import fake_low\n"
                                   "if TYPE_CHECKING:\n"
                                   "    from flyviz.model import fake_typed_back\n",
        "flyviz.model.fake_typed_back": "from flyviz.model import fake_typed\n",
    }
    saved_modules, saved_trees = dict(MODULES), dict(TREES)
    try:
        for name, text in code.items():
            MODULES[name] = SOURCE / "model" / (name.rpartition(".")[2] + ".py")
            TREES[name] = ast.parse(text)
        graph = run_time_import_graph()
        circles = run_time_import_circles(graph)
        assert ("flyviz.model.fake_low", "flyviz.model.fake_mid",
                "flyviz.viewer.fake_high") in circles
        assert not any("flyviz.model.fake_typed" in circle for circle in circles)
        assert "flyviz.model.fake_mid -> flyviz.viewer.fake_high" in upward_imports(graph)
    finally:
        MODULES.clear()
        MODULES.update(saved_modules)
        TREES.clear()
        TREES.update(saved_trees)


def test_the_intervention_types_import_neither_the_engine_nor_patching():
    # Not even on use: the types are what the engine, patching and resolution build on.
    imported = {target for _line, target, _name in
                _imports("flyviz.model.intervention_types", TREES["flyviz.model.intervention_types"])}
    assert imported <= {"flyviz.model.errors"}


def test_the_window_host_has_ten_members_at_most_and_no_widget():
    """Features talk to the state, background calls, actions, docks and messages: the
    protocol names no widget of the window (the brain view, the inspector, the text, the
    playback), and stays small."""
    pytest.importorskip("PySide6")
    import importlib

    from PySide6.QtWidgets import QWidget

    tree = TREES["flyviz.app.base.host"]
    members = host_members(tree)
    assert "state" in members and len(members) <= MOST_HOST_MEMBERS, sorted(members)
    classes = host_annotation_classes(tree)
    assert classes["state"] == ("flyviz.viewer.state", "ViewerState")     # the check reads
    widgets = {member: cls for member, (module, cls) in classes.items()
               if issubclass(getattr(importlib.import_module(module), cls), QWidget)
               or cls in WINDOW_PARTS}
    assert widgets == {}


def test_the_features_reach_the_window_only_through_the_host():
    assert len(feature_modules()) >= 9
    assert host_reach_ins(set(host_members(TREES["flyviz.app.base.host"]))) == []


def test_the_checks_find_what_they_are_meant_to_find():
    # Each check, run on a tree that breaks its rule, finds the break: a check that can
    # never fail would keep nothing.
    code = {
        "flyviz.model.fake_a": "from flyviz.model.engine import _as_f32\n"
                               "from flyviz.analysis import _kernels\n"
                               "from flyviz.model import fake_b\n"
                               "import flyviz.model.engine as engine\n"
                               "x = engine._helper\n"
                               "def f(rec):\n    return rec._infos\n",
        "flyviz.model.fake_b": "from flyviz.model import fake_a\n",
        # private attributes of other modules' objects, by getattr, through an annotated
        # receiver whose class lives elsewhere, and off another library's object: caught
        "flyviz.model.fake_c": "import sys\n"
                               "from flyviz.record.recording import Recording\n"
                               "from flyviz.viewer.highlight import Highlights\n"
                               "class Part:\n"
                               "    def __init__(self, highlights: Highlights) -> None:\n"
                               "        self._masks = {}\n"
                               "        self.highlights: Highlights = highlights\n"
                               "    def merge(self, other: 'Part', rec: 'Recording | None'):\n"
                               "        self._masks.update(self.highlights._masks)\n"
                               "        other._masks.update(getattr(rec, '_source', None))\n"
                               "        sys._getframe(0)\n"
                               "        return hasattr(super(), '_masks')\n",
        "flyviz.app.fake_feature": "class F:\n    def __init__(self, host):\n"
                                   "        self.host = host\n"
                                   "        host.brain.pick_clicked.connect(print)\n"
                                   "        self.host.text_panel.set_flows(None)\n"
                                   "        if hasattr(self.host, 'runs'):\n"
                                   "            getattr(host, 'inspector')\n"
                                   "        host.state.index = 0\n"
                                   "def install(host):\n    return F(host)\n",
        "flyviz.app.fake_host": "from typing import Protocol\n"
                                "from flyviz.app.brain.brain_view import BrainView\n"
                                "class WindowHost(Protocol):\n    brain: 'BrainView'\n"
                                "    def widget(self) -> 'BrainView': ...\n",
    }
    saved_modules, saved_trees = dict(MODULES), dict(TREES)
    try:
        for name, text in code.items():
            MODULES[name] = SOURCE / "model" / (name.rpartition(".")[2] + ".py")
            TREES[name] = ast.parse(text)
        imports = "\n".join(cross_module_private_imports())
        assert "fake_a.py:1: imports _as_f32 from flyviz.model.engine" in imports
        assert "fake_a.py:2: imports the private module flyviz.analysis._kernels" in imports
        assert "fake_a.py:5: reads _helper of the module flyviz.model.engine" in imports
        attributes = "\n".join(cross_module_private_attributes())
        assert "fake_a.py:7: rec._infos is private to flyviz.record.recording" in attributes
        fake_c = sorted(line for line in attributes.splitlines() if "fake_c.py" in line)
        assert fake_c == [
            "flyviz/model/fake_c.py:10: getattr(rec, '_source', None) is private to "
            "flyviz.record.recording",
            "flyviz/model/fake_c.py:11: sys._getframe is private to another library "
            "(see FOREIGN_PRIVATES)",
            "flyviz/model/fake_c.py:9: self.highlights._masks is private to "
            "flyviz.viewer.highlight"], fake_c
        assert ["flyviz.model.fake_a", "flyviz.model.fake_b", "flyviz.model.fake_a"] in \
            import_cycles("flyviz.model")
        reach_ins = "\n".join(host_reach_ins({"state"}))
        for line, what in ((4, "host.brain is not"), (5, "self.host.text_panel is not"),
                           (6, "hasattr on self.host"), (7, "getattr on host")):
            assert f"fake_feature.py:{line}: {what}" in reach_ins, reach_ins
        assert "fake_feature.py:8" not in reach_ins
        assert host_annotation_classes(TREES["flyviz.app.fake_host"]) == {
            "brain": ("flyviz.app.brain.brain_view", "BrainView"),
            "widget": ("flyviz.app.brain.brain_view", "BrainView")}
    finally:
        MODULES.clear()
        MODULES.update(saved_modules)
        TREES.clear()
        TREES.update(saved_trees)


# ------------------------------------------------------------------ the app's layout
APP = SOURCE / "app"
#: The app's packages that may import the language model's views (``flyviz.app.language``):
#: the window, which installs every feature, and those views themselves.
MAY_IMPORT_LANGUAGE_VIEWS = {"window", "language"}
#: Names that belong to the language model's kind.
LANGUAGE_NAMES = ("tokenizer", "logits", "top_k", "topk")


def _imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at its top or inside functions (``from a import b``
    counts as ``a`` and ``a.b``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_the_app_is_grouped_into_packages_and_only_the_window_reaches_the_language_views():
    flat = sorted(p.name for p in APP.glob("*.py") if p.name not in ("__init__.py", "_testing.py"))
    assert flat == [], f"app modules outside a sub-package: {flat}"
    packages = sorted(d for d in APP.iterdir() if (d / "__init__.py").is_file())
    assert {"window", "brain", "runs", "language", "spiking"} <= {d.name for d in packages}
    for package in packages:
        if package.name in MAY_IMPORT_LANGUAGE_VIEWS:
            continue
        for path in sorted(package.rglob("*.py")):
            reached = sorted(m for m in _imported_modules(path)
                             if m == "flyviz.app.language" or m.startswith("flyviz.app.language."))
            assert not reached, f"{path.relative_to(SOURCE)} imports {reached}"


#: The app's two ends: ``flyviz.app.window`` is the composition root (the main window, its
#: layout, files, the export dialog, docks and controls), which installs every feature;
#: ``flyviz.app.base`` is what every feature builds on (the theme, background calls and jobs,
#: actions, the wheel guard, docks, the run session, the host protocol). Arrows run one way:
#: window -> features -> base.
APP_ROOT = "flyviz.app.window"
APP_BASE = "flyviz.app.base"


def _is_feature(module: str) -> bool:
    """A module of one of the app's feature packages (``flyviz.app.<feature>``)."""
    return _inside(module, "flyviz.app") and module.count(".") >= 2 \
        and not _inside(module, APP_ROOT) and not _inside(module, APP_BASE) \
        and module != "flyviz.app._testing"


def features_importing_the_window(trees: dict[str, ast.AST]) -> list[str]:
    """Every import of the composition root (``flyviz.app.window`` or a module of it) by a
    feature, read off the syntax trees: at the top, inside functions and for the type
    checker alike (a feature that names the window, even for a type, is built for it)."""
    return sorted(f"{module}:{line} imports {target}" for module, tree in trees.items()
                  if _is_feature(module)
                  for line, target, _name in _imports(module, tree)
                  if _inside(target, APP_ROOT))


def base_importing_above_it(graph: dict[str, set[str]]) -> list[str]:
    """Every run-time arrow (lazy imports included) from the app's base to the window or
    to a feature."""
    return sorted(f"{module} -> {target}" for module, targets in graph.items()
                  if _inside(module, APP_BASE) for target in targets
                  if _inside(target, APP_ROOT) or _is_feature(target))


def test_the_features_never_import_the_window_and_the_base_imports_neither():
    assert features_importing_the_window({m: TREES[m] for m in MODULES}) == []
    assert base_importing_above_it(run_time_import_graph()) == []


def test_the_app_layer_checks_find_a_feature_reaching_for_the_window():
    planted = {
        # lazily, from a function: caught
        "flyviz.app.atlas.fake_lazy": ast.parse("def f():\n"
                                                "    from flyviz.app.window import files\n"),
        # for the type checker only: caught as well
        "flyviz.app.lesion.fake_typed": ast.parse(
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from flyviz.app.window.main_window import MainWindow\n"),
        # the base, and the window itself importing its own modules: fine
        "flyviz.app.brain.fake_base": ast.parse("from flyviz.app.base import theme\n"),
        "flyviz.app.window.fake_root": ast.parse("from flyviz.app.window import files\n"),
    }
    assert features_importing_the_window(planted) == [
        "flyviz.app.atlas.fake_lazy:2 imports flyviz.app.window.files",
        "flyviz.app.lesion.fake_typed:3 imports flyviz.app.window.main_window"]
    graph = {"flyviz.app.base.fake": {"flyviz.app.brain.brain_view", "flyviz.app.window",
                                      "flyviz.app.base.theme", "flyviz.viewer.state"}}
    assert base_importing_above_it(graph) == [
        "flyviz.app.base.fake -> flyviz.app.brain.brain_view",
        "flyviz.app.base.fake -> flyviz.app.window"]


def test_the_spiking_kinds_views_name_no_tokenizer_logits_or_top_k():
    for path in sorted((APP / "spiking").rglob("*.py")):
        words = set(re.findall(r"[A-Za-z_]+", path.read_text(encoding="utf-8").lower()))
        assert not words & set(LANGUAGE_NAMES), f"{path.relative_to(SOURCE)}: {words & set(LANGUAGE_NAMES)}"


# ------------------------------------------------------------------ kinds are asked, never told apart
KINDS_PACKAGE = "flyviz.kinds"


def _kind_vocabulary() -> tuple[set[str], set[str], set[str], set[str]]:
    """What names a kind's identity: ``(names, classes, keys, channels)`` — the names that
    flyviz.kinds' modules bind to a kind or a kind's key (``LANGUAGE``, ``SPIKING_KEY``),
    the kinds' classes (``SpikingKind``), the registered keys and their side channels."""
    import importlib

    from flyviz.kinds import ModelKind, registered_kinds

    kinds = registered_kinds()
    keys = set(kinds)
    channels = {channel.key for kind in kinds.values() for channel in kind.side_channels}
    names: set[str] = set()
    classes: set[str] = set()
    for module in (m for m in MODULES if _inside(m, KINDS_PACKAGE)):
        for name, value in vars(importlib.import_module(module)).items():
            if isinstance(value, type) and issubclass(value, ModelKind) and value is not ModelKind:
                classes.add(name)
            elif isinstance(value, ModelKind) or (isinstance(value, str) and value in keys
                                                  and name.isupper()):
                names.add(name)
    return names, classes, keys, channels


def _terminal(node: ast.AST) -> str:
    """The last name of ``a.b.c`` (``c``), of ``c``, else ``""``."""
    return node.id if isinstance(node, ast.Name) else \
        node.attr if isinstance(node, ast.Attribute) else ""


def _is_kind_expression(node: ast.AST) -> bool:
    """``kind``, ``x.kind``, ``presets_kind``, ``kind_of(m)``, ``kind_of_recording(r)``,
    ``metadata.get("kind")``, ``metadata["kind"]``..."""
    if isinstance(node, ast.Call):
        if _terminal(node.func) == "get" and node.args:
            return isinstance(node.args[0], ast.Constant) and node.args[0].value == "kind"
        return _terminal(node.func) in ("kind_of", "kind_of_recording", "kind_named")
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "kind"
    name = _terminal(node)
    return name == "kind" or name.endswith("_kind")


def kind_identity_tests(tree: ast.AST, vocabulary: tuple[set[str], set[str], set[str], set[str]]
                        ) -> list[tuple[int, str]]:
    """``(line, code)`` of every place in ``tree`` that tells kinds of model apart rather than
    asking the kind: comparing to a named kind or its key (``== LANGUAGE``, ``is SPIKING``,
    ``kind.key == "spiking"``, ``== SPIKING_KEY``), comparing two kinds, ``isinstance`` with a
    kind's class, ``kind.has("text")`` and ``hasattr``/``getattr`` on a kind."""
    names, classes, keys, channels = vocabulary
    found = []

    def named(node: ast.AST) -> bool:
        return _terminal(node) in names | classes

    for node in ast.walk(tree):
        hit = False
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            kindish = [_is_kind_expression(o) or (_terminal(o) == "key" and isinstance(
                o, ast.Attribute) and _is_kind_expression(o.value)) for o in operands]
            hit = any(named(o) for o in operands) \
                or any(isinstance(o, ast.Constant) and o.value in keys for o in operands) \
                and any(kindish) \
                or sum(kindish) >= 2 \
                or any(isinstance(o, ast.Attribute) and o.attr == "key"
                       and _is_kind_expression(o.value) for o in operands)
        elif isinstance(node, ast.Call):
            func = _terminal(node.func)
            if func in ("isinstance", "issubclass") and len(node.args) == 2:
                second = node.args[1]
                targets = second.elts if isinstance(second, ast.Tuple) else [second]
                hit = any(_terminal(t) in classes for t in targets)
            elif func in ("hasattr", "getattr") and node.args:
                hit = _is_kind_expression(node.args[0])
            elif func == "has" and isinstance(node.func, ast.Attribute) and node.args:
                arg = node.args[0]
                hit = _is_kind_expression(node.func.value) and (
                    not isinstance(arg, ast.Constant) or arg.value in channels)
        if hit:
            found.append((getattr(node, "lineno", 0), ast.unparse(node)))
    return found


def test_nothing_outside_the_kinds_tells_kinds_apart():
    vocabulary = _kind_vocabulary()
    assert {"LANGUAGE", "SPIKING", "SPIKING_KEY"} <= vocabulary[0]
    assert {"LanguageModelKind", "SpikingKind"} <= vocabulary[1]
    found = [f"{MODULES[m].relative_to(SOURCE.parent)}:{line}: {code}"
             for m, tree in sorted(TREES.items()) if not _inside(m, KINDS_PACKAGE)
             for line, code in kind_identity_tests(tree, vocabulary)]
    assert found == [], "ask the kind (flyviz.kinds.ModelKind) instead:\n" + "\n".join(found)


def test_the_kind_identity_scan_finds_each_way_of_telling_kinds_apart():
    # A planted break of each form is found; asking the kind, and other things named
    # "kind" or "key", are not.
    planted = ("if state.kind == LANGUAGE: pass\n"                          # 1
               "if kind is not SPIKING: pass\n"                             # 2
               "if kind_of_recording(rec).key == 'spiking': pass\n"         # 3
               "if self.kind.key != other: pass\n"                          # 4
               "x = kind.key in (SPIKING_KEY,)\n"                           # 5
               "if isinstance(kind, (int, SpikingKind)): pass\n"            # 6
               "reads = state.kind.has('text')\n"                           # 7
               "if hasattr(kind, 'recording_model'): pass\n"                # 8
               "if kind != kind_of(bundle.model): pass\n"                   # 9
               "if recording.metadata.get('kind') == 'spiking': pass\n"     # 10
               "if kind.shows(LM) and kind.reads_text: pass\n"              # 11: asks
               "if isinstance(kind, ModelKind): pass\n"                     # 12: any kind
               "if node.key == 'id' and anatomy.kind == 'measured': pass\n"  # 13: not kinds
               "layers = {kind.key: kind for kind in kinds}\n")             # 14: no test
    tree = ast.parse(planted)
    lines = sorted({line for line, _ in kind_identity_tests(tree, _kind_vocabulary())})
    assert lines == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], lines


# --------------------------------------------------------------------- one place steps runs
#: The module that steps every run (flyviz.runs.Run): the one caller of a ``frames``.
RUN_STEPPER = "flyviz.runs"


def frames_calls(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, code)`` of every call of a ``frames`` method in ``tree``: a kind's
    ``kind.frames(model, request...)``, a model's ``model.frames(prompt...)``, whatever
    the object is called (a run's own iterators are named otherwise)."""
    return [(node.lineno, ast.unparse(node)) for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "frames"]


def test_one_place_in_flyviz_steps_a_kind_or_a_models_frames():
    """Every host (the window, the notebook, napari, the command line, scripts) starts a run
    through flyviz.runs: a second place that steps a model itself would be a second run
    machine, blind to what the kind records beside its frames."""
    found = [f"{m}:{line}: {code}" for m, tree in sorted(TREES.items())
             if not _inside(m, KINDS_PACKAGE) for line, code in frames_calls(tree)]
    assert len(found) == 1 and found[0].startswith(f"{RUN_STEPPER}:"), (
        "start runs through flyviz.runs.Run, not a kind's or a model's frames:\n"
        + "\n".join(found))


def test_the_frames_check_finds_a_host_that_steps_a_model_itself():
    planted = ast.parse("def run_prompt(model, kind, prompt):\n"
                        "    for frame in model.frames(prompt, recording=None):\n"
                        "        pass\n"
                        "    return list(kind.frames(model, prompt))\n")
    assert [line for line, _code in frames_calls(planted)] == [2, 4]
    # A run's own iterators, and a local function named frames, are not a second stepper.
    assert frames_calls(ast.parse("run.stream(False)\nrun.staged_frames()\n"
                                  "def frames(emit): pass\nframes(print)\n")) == []


#: pyqtgraph's views, which take the focus from Tab; the app builds its plots from
#: flyviz.app.base.plots, whose own are clicked to, never tabbed to.
PYQTGRAPH_VIEWS = ("PlotWidget", "GraphicsLayoutWidget", "GraphicsView", "ImageView")
PLOTS_MODULE = "flyviz.app.base.plots"


def pyqtgraph_views_built(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, code)`` of every pyqtgraph view ``tree`` makes (``pg.PlotWidget(...)``) or
    subclasses (``class Plot(pg.PlotWidget)``), however pyqtgraph was imported."""
    def view(node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr in PYQTGRAPH_VIEWS
                and isinstance(node.value, ast.Name) and node.value.id in ("pg", "pyqtgraph"))

    found = [(n.lineno, ast.unparse(n)) for n in ast.walk(tree)
             if isinstance(n, ast.Call) and view(n.func)]
    found += [(n.lineno, f"class {n.name}({ast.unparse(b)})") for n in ast.walk(tree)
              if isinstance(n, ast.ClassDef) for b in n.bases if view(b)]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pyqtgraph"):
            found += [(node.lineno, f"from {node.module} import {a.name}")
                      for a in node.names if a.name in PYQTGRAPH_VIEWS]
    return sorted(found)


def test_every_plot_in_the_app_is_built_from_the_plots_that_take_no_tab():
    """A dock's plot made from pyqtgraph's own view was a Tab stop with no mark whose arrow
    keys stepped the run; flyviz.app.base.plots makes every plot clicked to only."""
    found = [f"{m}:{line}: {code}" for m, tree in sorted(TREES.items())
             if _inside(m, "flyviz.app") and m != PLOTS_MODULE
             for line, code in pyqtgraph_views_built(tree)]
    assert found == [], ("build plots from flyviz.app.base.plots (PlotWidget, "
                         "GraphicsLayoutWidget), not pyqtgraph's own:\n" + "\n".join(found))


def test_the_plot_check_finds_a_dock_that_makes_pyqtgraphs_own_plot():
    planted = ast.parse("import pyqtgraph as pg\nfrom pyqtgraph import ImageView\n"
                        "class Curve(pg.PlotWidget):\n    pass\n"
                        "plot = pg.PlotWidget(axisItems={})\nbars = pg.BarGraphItem(x=[0])\n")
    assert [line for line, _code in pyqtgraph_views_built(planted)] == [2, 3, 5]
