"""House habits a reviewer checks: typed lazy exports, one version, every package shipped."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import shutil
import subprocess
import sys

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest's own dependency
    import tomli as tomllib  # type: ignore[no-redef]

import winnow


@pytest.mark.parametrize("package", ["winnow.serving", "winnow.runtime"])
def test_lazy_exports_are_typed_and_resolve(package, root):
    """Each lazy name is imported under TYPE_CHECKING (so a type checker sees its real type),
    listed in __all__, and resolves at run time to the object of the module it names."""
    module = importlib.import_module(package)
    path = root / package.replace(".", "/") / "__init__.py"
    typed: dict[str, str] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module
                typed.update({a.name: imp.module for a in imp.names})
    assert typed == module._EXPORTS
    assert module.__all__ == sorted(module._EXPORTS)
    for name, source in module._EXPORTS.items():
        assert getattr(module, name) is getattr(importlib.import_module(source), name)


def test_version_is_written_once(root):
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "winnow.__version__"}
    assert importlib.metadata.version("winnow") == winnow.__version__


def test_torch_is_pinned_once(root):
    pins = [
        path.relative_to(root)
        for path in [root / "pyproject.toml", root / "Makefile", *root.glob(".ci/*")]
        if "torch==" in path.read_text()
    ]
    assert pins == [root.joinpath("pyproject.toml").relative_to(root)]


def test_pyarrow_is_an_extra_not_a_base_dependency(root):
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert not any(d.startswith("pyarrow") for d in project["dependencies"])
    assert project["optional-dependencies"]["parquet"] == ["pyarrow>=14"]


def test_every_package_is_found(root):
    """setup.py finds every folder of winnow that holds Python code, and adds the models."""
    from setuptools import find_packages

    found = set(find_packages(where=str(root), include=["winnow", "winnow.*"]))
    folders = {
        ".".join(p.parent.relative_to(root).parts)
        for p in (root / "winnow").rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert folders <= found, f"folders with code but no __init__.py: {folders - found}"
    assert "winnow.models" in (root / "setup.py").read_text()


@pytest.mark.slow
def test_mypy_sees_the_real_types_of_lazy_exports(tmp_path, root):
    if shutil.which("mypy") is None and importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed")
    snippet = tmp_path / "use.py"
    snippet.write_text(
        "from winnow.serving import ImportanceClassifier, SemanticCompressor\n"
        "from winnow.runtime import ContextBudget\n"
        "reveal_type(ImportanceClassifier.load)\n"
        "reveal_type(SemanticCompressor().compress)\n"
        "reveal_type(ContextBudget)\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--follow-imports=silent", str(snippet)],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=600,
    )
    revealed = [line for line in run.stdout.splitlines() if "Revealed type" in line]
    assert len(revealed) == 3, run.stdout + run.stderr
    assert not any(line.endswith('"Any"') for line in revealed), run.stdout  # what __getattr__ gave
    assert revealed[0].endswith('-> winnow.serving.classifier.ImportanceClassifier"')
    assert revealed[1].endswith('-> winnow.serving.compressor.CompressionResult"')
    assert revealed[2].endswith('-> winnow.runtime.budget.ContextBudget"')
