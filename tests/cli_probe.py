"""Running a command-line tool as a user would, for the fault and fuzz tests: in a fresh
process, with its exit code, its output, and a digest of the files around it."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str


# The packages a TensorFlow-free path must neither need nor load.
TENSORFLOW_PACKAGES = ("tensorflow", "keras", "tensorflow_text", "tf_keras")

# `main(argv)` of the module named by the first argument, in a process where the packages
# above cannot be imported (as where they are not installed); it fails if one was loaded.
_MAIN_WITHOUT_TENSORFLOW = f"""
import importlib, sys

class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {TENSORFLOW_PACKAGES!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Block())
module = sys.argv.pop(1)
code = importlib.import_module(module).main(sys.argv[1:])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {TENSORFLOW_PACKAGES!r})
assert not heavy, heavy
sys.exit(code)
"""


def tool_env() -> dict:
    """The environment of a tool started from the tests: the repository on PYTHONPATH,
    TensorFlow's C++ logging quiet."""
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "TF_CPP_MIN_LOG_LEVEL": "3"}


def command(module: str, *args, without_tensorflow: bool = False) -> list[str]:
    """The command line of `python -m module args...`; with `without_tensorflow`, of the
    module's `main(args)` with TensorFlow, Keras and tensorflow-text unimportable."""
    if without_tensorflow:
        return [sys.executable, "-c", _MAIN_WITHOUT_TENSORFLOW, module, *map(str, args)]
    return [sys.executable, "-m", module, *map(str, args)]


def run_cli(module: str, *args, cwd: Path | None = None, stdin: bytes | None = None,
            env: dict | None = None, timeout: float = 600,
            without_tensorflow: bool = False) -> Result:
    """`python -m module args...` with the repository importable (see `command` for
    `without_tensorflow`); never raises on failure."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3",
                   **(env or {})}
    environment.pop("KT_DEBUG", None)
    done = subprocess.run(command(module, *args, without_tensorflow=without_tensorflow),
                          cwd=cwd or ROOT, input=stdin if stdin is not None else b"",
                          capture_output=True, env=environment, timeout=timeout)
    return Result(done.returncode, done.stdout.decode("utf-8", "replace"),
                  done.stderr.decode("utf-8", "replace"))


def tree_digest(root: Path) -> dict[str, str]:
    """{relative path: sha256 (or 'dir' / 'link -> target')} of everything below root."""
    out = {}
    for path in sorted(Path(root).rglob("*")):
        key = path.relative_to(root).as_posix()
        if path.is_symlink():
            out[key] = f"link -> {os.readlink(path)}"
        elif path.is_dir():
            out[key] = "dir"
        else:
            out[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def assert_clean_failure(result: Result, code: int, *words: str) -> None:
    """Exit `code`, no traceback, and an `error:` line naming each of `words`."""
    assert result.code == code, (result.code, result.stderr[-3000:])
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors, result.stderr[-3000:]
    for word in words:
        assert word in errors[-1], (word, errors[-1])


def call_main(main, *args) -> Result:
    """`main(args)` of a tool in this process, as `run_cli` reports a fresh one (faster: no
    new interpreter, for the many cases of a fuzz test). An exception that escapes `main`
    is reported as the traceback a user would see, so `assert_clean_failure` catches it."""
    import contextlib
    import io
    import traceback

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as stop:  # argparse's usage errors
            code = stop.code if isinstance(stop.code, int) else 1
        except BaseException:  # noqa: BLE001 - reported, not raised
            traceback.print_exc()
            code = 1
    return Result(code, out.getvalue(), err.getvalue())
