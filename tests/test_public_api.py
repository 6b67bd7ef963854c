"""Every module's ``__all__`` names what it really defines, and no module needs torch to import."""

import importlib
import pkgutil
import subprocess
import sys

import pytest

import fabricscope
from helpers import cli_env

MODULES = sorted(
    name
    for _, name, _ in pkgutil.walk_packages(fabricscope.__path__, "fabricscope.")
    if not name.endswith("__main__") and not name.endswith(".worker")
)


@pytest.mark.parametrize("name", MODULES)
def test_all_names_what_the_module_defines(name):
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{name} has no __all__: say what it exports (an empty list for none)"
    missing = [item for item in exported if not hasattr(module, item)]
    assert missing == [], f"{name}.__all__ names what it does not define: {missing}"
    assert len(set(exported)) == len(exported), f"{name}.__all__ repeats a name"


def test_importing_the_package_does_not_import_torch():
    code = (
        "import sys, importlib, pkgutil, fabricscope\n"
        "for _, n, _ in pkgutil.walk_packages(fabricscope.__path__, 'fabricscope.'):\n"
        "    if not n.endswith(('__main__', '.worker')): importlib.import_module(n)\n"
        "print('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), check=True)
    assert done.stdout.strip() == "False"
