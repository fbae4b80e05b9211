"""``python -m distgnn.train.script``: a user's script run as plain ``python`` runs it (the
same ``__name__``, ``__file__``, ``sys.argv``, ``sys.path[0]``), but a top-level module
missing from the environment exits 2 with one line and a termination-log record, so
that neither the operator nor ``distgnn run`` retries it. Real interpreters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from distgnn import contract

RUNNER = ["-m", "distgnn.train.script"]
SEES = """
import json, os, sys
print(json.dumps({
    "name": __name__,
    "file": os.path.abspath(__file__) == __file__ and __file__,
    "argv": sys.argv,
    "path0": sys.path[0],
    "main": sys.modules["__main__"].__dict__ is globals(),
}))
"""


def run(
    argv: list[str], cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python ARGV`` in ``cwd``, with this checkout's distgnn importable."""
    path = os.pathsep.join(p for p in sys.path if p)
    return subprocess.run(
        [sys.executable, *argv],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": path, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_script_sees_what_plain_python_gives_it(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "train.py").write_text(SEES, encoding="utf-8")
    plain = run(["sub/train.py", "--epochs", "2"], tmp_path)
    wrapped = run([*RUNNER, "sub/train.py", "--epochs", "2"], tmp_path)
    assert plain.returncode == wrapped.returncode == 0, wrapped.stderr
    seen = json.loads(wrapped.stdout)
    assert json.loads(plain.stdout) == seen
    assert seen["name"] == "__main__" and seen["argv"] == ["sub/train.py", "--epochs", "2"]
    assert seen["path0"] == str((tmp_path / "sub").resolve())
    assert seen["file"] == str(tmp_path / "sub" / "train.py") and seen["main"]


def test_a_module_sees_what_python_m_gives_it(tmp_path: Path) -> None:
    (tmp_path / "mytrain.py").write_text(SEES, encoding="utf-8")
    plain = run(["-m", "mytrain", "--x", "1"], tmp_path)
    wrapped = run([*RUNNER, "-m", "mytrain", "--x", "1"], tmp_path)
    assert plain.returncode == wrapped.returncode == 0, wrapped.stderr
    assert json.loads(plain.stdout) == json.loads(wrapped.stdout)
    assert json.loads(wrapped.stdout)["argv"] == [str(tmp_path / "mytrain.py"), "--x", "1"]


def test_a_missing_module_exits_2_in_one_line_and_a_termination_record(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import tqdm_not_installed_xyz\n", encoding="utf-8")
    term = tmp_path / "termination-log"
    env = {contract.ENV_TERMINATION_LOG: str(term), "RANK": "1"}
    assert run(["train.py"], tmp_path).returncode == 1  # plain python: a restart would follow
    res = run([*RUNNER, "train.py"], tmp_path, env)
    assert res.returncode == contract.EXIT_CONFIG_ERROR, res.stderr
    line = f"No module named 'tqdm_not_installed_xyz' (not installed for {sys.executable})"
    assert res.stderr.splitlines()[-1] == f"distgnn script: error: {line}"
    assert "Traceback" in res.stderr  # as python prints it, above
    assert json.loads(term.read_text(encoding="utf-8")) == {
        "error": "ModuleNotFoundError",
        "message": line,
        "rank": "1",
    }


@pytest.mark.parametrize(
    ("source", "code"),
    [
        # a submodule a package lacks, or one raised by hand: the script's own error
        ("import json.no_such_submodule_xyz\n", 1),
        ("raise ModuleNotFoundError('by hand')\n", 1),
        ("raise RuntimeError('boom')\n", 1),
        ("import sys; sys.exit(3)\n", 3),
        ("import sys; sys.exit(2)\n", 2),
    ],
)
def test_other_exits_are_the_scripts_own(tmp_path: Path, source: str, code: int) -> None:
    (tmp_path / "train.py").write_text(source, encoding="utf-8")
    assert run(["train.py"], tmp_path).returncode == code
    res = run([*RUNNER, "train.py"], tmp_path)
    assert res.returncode == code, res.stderr
    assert "distgnn script: error" not in res.stderr


def test_a_script_that_does_not_exist_exits_2_as_python_does(tmp_path: Path) -> None:
    assert run(["nope.py"], tmp_path).returncode == 2
    res = run([*RUNNER, "nope.py"], tmp_path)
    assert res.returncode == 2 and "can't open file" in res.stderr


@pytest.mark.parametrize("module", ["not_installed_pkg_xyz", "not_installed_pkg_xyz.train"])
def test_a_missing_module_to_run_with_m_exits_2(tmp_path: Path, module: str) -> None:
    """``python -m MODULE`` whose (top-level) package is not installed: runpy's lookup
    error is the missing module, exit 2, not a traceback and exit 1 to restart on."""
    assert run(["-m", module], tmp_path).returncode == 1  # plain python
    res = run([*RUNNER, "-m", module], tmp_path)
    assert res.returncode == contract.EXIT_CONFIG_ERROR, res.stderr
    line = f"No module named 'not_installed_pkg_xyz' (not installed for {sys.executable})"
    assert res.stderr.splitlines()[-1] == f"distgnn script: error: {line}"


def test_a_missing_submodule_of_an_installed_package_is_pythons_error(tmp_path: Path) -> None:
    res = run([*RUNNER, "-m", "json.no_such_submodule_xyz"], tmp_path)
    assert res.returncode == 1 and "distgnn script: error" not in res.stderr, res.stderr
