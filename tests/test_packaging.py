"""`pip install .`: the wheel holds one top-level package, and its console scripts run."""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Where each repository folder lands in the installed package.
INSTALLED_AS = {"keras_transformer": "keras_transformer", "train": "keras_transformer/train",
                "export": "keras_transformer/export"}
SCRIPTS = {"kt-train", "kt-evaluate", "kt-average", "kt-visualize", "kt-export", "kt-parity",
           "kt-translate", "kt-classify", "kt-summarize", "kt-generate", "kt-serve",
           "kt-fill-mask", "kt-api"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--wheel-dir", str(out), str(ROOT)],
                   check=True, capture_output=True, cwd=out)
    (path,) = out.glob("keras_transformer-*.whl")
    return path


def test_wheel_claims_only_the_library_name(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"keras_transformer"}
    # Every module of the library and of both command-line packages is in it.
    for folder, installed in INSTALLED_AS.items():
        for module in (ROOT / folder).rglob("*.py"):
            relative = module.relative_to(ROOT / folder).as_posix()
            assert f"{installed}/{relative}" in names, f"{folder}/{relative} is not in the wheel"
    assert "keras_transformer/export/explorer.html" in names  # the page export.serve serves


def test_console_scripts_run_from_an_install(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target",
                    str(target), str(wheel)], check=True, capture_output=True)
    entry_points = configparser.ConfigParser()
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".dist-info/entry_points.txt")]
        entry_points.read_string(z.read(name).decode())
    assert set(entry_points["console_scripts"]) == SCRIPTS
    # Run from outside the repository, so only the installed copy can be imported.
    env = {**os.environ, "PYTHONPATH": str(target), "TF_CPP_MIN_LOG_LEVEL": "3"}
    for script, target_ref in entry_points["console_scripts"].items():
        module, function = target_ref.split(":")
        code = f"import sys; sys.argv = [{script!r}, '--help']; from {module} import {function}; {function}()"
        result = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path,
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, f"{script} --help failed: {result.stderr[-2000:]}"
        # The usage line is a command the user can copy: the script, not `python -m train`.
        assert result.stdout.startswith(f"usage: {script} "), result.stdout[:200]
        assert "python -m" not in result.stdout.split("\n\n")[0], result.stdout[:400]
        assert "usage:" in result.stdout and "--help" in result.stdout, script
