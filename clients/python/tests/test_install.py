"""`pip install ./clients/python` into a fresh virtual environment, offline."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

from .support import PACKAGE_ROOT, SOCKET

PIP_ENV = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1", "PIP_NO_CACHE_DIR": "1"}


def run(argv, **kwargs):
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, **kwargs)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, argv))} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


CAN_BUILD = ("import importlib.util as u, sys; "
             "sys.exit(0 if u.find_spec('wheel') or u.find_spec('setuptools.command.bdist_wheel') else 1)")


def make_venv(path: Path) -> Path:
    """A fresh venv that can build a wheel without the network.

    The system's interpreter comes first (the one the project's tests use),
    then this one. A venv's own setuptools may need the `wheel` package
    (setuptools < 70.1): a Debian system has it as python3-wheel, which a
    venv with the system's site-packages sees."""
    interpreters = list(dict.fromkeys(p for p in ("/usr/bin/python3", sys.executable) if Path(p).exists()))
    for interpreter in interpreters:
        for options in ([], ["--system-site-packages"]):
            if path.exists():
                shutil.rmtree(path)
            run([interpreter, "-m", "venv", *options, str(path)])
            python = path / "bin" / "python"
            if subprocess.run([str(python), "-c", CAN_BUILD]).returncode == 0:
                return python
    raise unittest.SkipTest("no offline way to build a wheel here: install python3-wheel (Debian) or wheel")


class InstallTests(unittest.TestCase):
    def test_pip_install_into_a_fresh_venv(self):
        with tempfile.TemporaryDirectory() as directory:
            root = Path(directory)
            # A copy, so the build's by-products (build/, *.egg-info) stay out of the checkout.
            source = root / "clients" / "python"
            shutil.copytree(PACKAGE_ROOT, source,
                            ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "tests"))
            python = make_venv(root / "venv")
            env = dict(os.environ, **PIP_ENV)
            run([str(python), "-m", "pip", "install", "--no-build-isolation", "--no-index", "./clients/python"],
                cwd=root, env=env)

            probe = ("import json, pathlib, browser_login as b; "
                     "print(json.dumps([b.__file__, (pathlib.Path(b.__file__).parent / 'py.typed').exists(), "
                     "b.__version__, sorted(b.ERROR_CLASSES) == sorted(c.code for c in b.ERROR_CLASSES.values())]))")
            # -I: neither the working directory nor PYTHONPATH can supply the package.
            found = json.loads(run([str(python), "-I", "-c", probe], cwd=root / "venv", env=env).stdout)
            module_file, typed, version, consistent = found
            self.assertTrue(Path(module_file).resolve().is_relative_to((root / "venv").resolve()), module_file)
            self.assertTrue(typed, "py.typed is installed")
            self.assertEqual(version, "0.1.0")
            self.assertTrue(consistent)

            if SOCKET:
                script = "import browser_login; print(browser_login.Broker().info().protocol)"
                info = run([str(python), "-I", "-c", script], cwd=root / "venv", env=env)
                self.assertEqual(info.stdout.strip(), "1")


if __name__ == "__main__":
    unittest.main()
