"""The distribution installs namespaced import names only, and every source package is listed in pyproject.toml."""
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GENERIC = {"bench", "transports", "plugins", "examples", "tests"}


def _setuptools():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_no_generic_top_level_names():
    tops = {name.split(".")[0] for name in _setuptools()["packages"]}
    assert not tops & GENERIC, f"generic top-level import names would be installed: {sorted(tops & GENERIC)}"


def test_every_source_package_is_installed():
    """A folder with an __init__.py under a mapped root must be in the explicit package list, or a fresh install lacks it."""
    cfg = _setuptools()
    dirs = {name: folder for name, folder in cfg["package-dir"].items() if name}
    roots = {"qwengpu": "qwengpu", "qccl": "qccl", **dirs}
    found = set()
    for name, folder in roots.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *rel)))
    missing = found - set(cfg["packages"])
    assert not missing, f"packages not listed in pyproject.toml [tool.setuptools] packages: {sorted(missing)}"
