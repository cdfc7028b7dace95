"""Imports point down only: apps -> strategy -> parallel_ops -> taskrt. Every file under the
three lower packages is parsed (not imported) and each import, relative ones resolved, as
well as importlib.import_module / __import__ of a constant name, must stay in its own
layer or go below it. The apps reach the strategy tools through strategy/workload.py."""
import ast
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYERS = ["taskrt", "parallel_ops", "strategy", "apps"]          # bottom to top


def python_files(package: str) -> list[str]:
    out = []
    for folder, _, names in os.walk(os.path.join(ROOT, package)):
        out += [os.path.join(folder, n) for n in sorted(names) if n.endswith(".py")]
    return sorted(out)


def imported_modules(path: str) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the file at `path`."""
    rel = os.path.relpath(path, ROOT)[:-3].split(os.sep)
    package = rel[:-1]                     # the package the file's relative imports start in
    tree = ast.parse(open(path).read(), path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module
            found.append((node.lineno, name))
        elif isinstance(node, ast.Call) and node.args and \
                isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            f = node.func
            callee = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if callee in ("import_module", "__import__"):
                found.append((node.lineno, node.args[0].value))
    return sorted(found)


def upward_imports(package: str) -> list[str]:
    level = LAYERS.index(package)
    bad = []
    for path in python_files(package):
        for line, name in imported_modules(path):
            top = name.split(".")[0]
            if top in LAYERS and LAYERS.index(top) > level:
                bad.append(f"{os.path.relpath(path, ROOT)}:{line} imports {name}")
    return bad


@pytest.mark.parametrize("package", LAYERS[:3])
def test_no_package_imports_a_layer_above_it(package):
    bad = upward_imports(package)
    assert not bad, f"{len(bad)} upward import(s):\n" + "\n".join(bad)


def test_the_check_sees_relative_and_dynamic_imports(tmp_path, monkeypatch):
    """The parser resolves what the real files use (a test that cannot fail is no test)."""
    pkg = tmp_path / "strategy" / "costs"
    pkg.mkdir(parents=True)
    (pkg / "x.py").write_text("from ..replay import a\nfrom . import b\nimport apps.flags\n"
                              "import importlib\nimportlib.import_module('apps.alexnet')\n"
                              "from apps import errors\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", str(tmp_path))
    names = [n for _, n in imported_modules(str(pkg / "x.py"))]
    assert names == ["strategy.replay", "strategy.costs", "apps.flags", "importlib",
                     "apps.alexnet", "apps"]
    assert len(upward_imports("strategy")) == 3


def test_apps_need_no_sys_path_insert():
    """apps is a package of the install (setup.py), so its scripts import it as is."""
    bad = [os.path.relpath(p, ROOT) for p in python_files("apps")
           if "sys.path.insert" in open(p).read()]
    assert not bad, bad
