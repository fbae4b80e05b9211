"""The container images, checked offline (no Docker engine): sources, users, entry points, pins."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
IMAGES = REPO / "images"
DOCKERFILES = {
    "operator": IMAGES / "operator" / "Dockerfile",
    "runtime": IMAGES / "runtime" / "Dockerfile",
}
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)


def parse(path: Path) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages, with line continuations joined."""
    text = re.sub(r"\\\n", " ", path.read_text())
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        op, _, rest = line.partition(" ")
        op, rest = op.upper(), rest.strip()
        if op == "FROM":
            words = rest.split()
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base=words[0], name=name))
        elif not stages:
            assert op == "ARG", f"{path}: {op} before the first FROM"
            key, _, default = rest.partition("=")
            global_args[key] = default
        else:
            stages[-1].instructions.append((op, rest))
    return global_args, stages


def expand(value: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m[1], m[0]), value)


def stage_args(stage: Stage) -> dict[str, str]:
    out: dict[str, str] = {}
    for op, rest in stage.instructions:
        if op == "ARG":
            key, _, default = rest.partition("=")
            out[key] = default
    return out


def dockerignore() -> list[str]:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]


def ignored(rel: str) -> bool:
    parts = rel.split("/")
    for pattern in dockerignore():
        p = pattern.removeprefix("**/")
        for i in range(len(parts)):
            if fnmatch.fnmatch("/".join(parts[: i + 1]), pattern) or fnmatch.fnmatch(parts[i], p):
                return True
    return False


@pytest.fixture(params=sorted(DOCKERFILES), name="image")
def _image(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_copy_sources_exist_and_are_in_the_build_context(image: str) -> None:
    _, stages = parse(DOCKERFILES[image])
    copied = 0
    for stage in stages:
        for op, rest in stage.instructions:
            if op not in {"COPY", "ADD"}:
                continue
            words = shlex.split(rest)
            if any(w.startswith("--from=") for w in words):
                continue
            *sources, _dest = [w for w in words if not w.startswith("--")]
            for src in sources:
                assert not src.startswith(("http://", "https://")), f"{image}: remote ADD {src}"
                assert (REPO / src).exists(), f"{image}: {op} {src}: not in the repository"
                assert not ignored(src.rstrip("/")), f"{image}: {src} is excluded by .dockerignore"
                copied += 1
    assert copied >= 3


def test_final_stage_runs_as_numeric_non_root(image: str) -> None:
    _, stages = parse(DOCKERFILES[image])
    users = [rest for op, rest in stages[-1].instructions if op == "USER"]
    assert users, f"{image}: the final stage sets no USER (runs as root)"
    user, _, group = users[-1].partition(":")
    assert user.isdigit() and int(user) != 0, f"{image}: USER {users[-1]} is not numeric non-root"
    assert not group or (group.isdigit() and int(group) != 0)
    assert int(user) == 1000, "the chart and the operator's pods use runAsUser 1000"


def test_final_stage_is_small(image: str) -> None:
    """The final stage copies the built virtualenv; it installs nothing itself."""
    _, stages = parse(DOCKERFILES[image])
    assert len(stages) >= 2, f"{image}: expected a build stage and a final stage"
    final_ops = [op for op, _ in stages[-1].instructions]
    assert "RUN" not in final_ops, f"{image}: RUN in the final stage adds layers"
    copies = [rest for op, rest in stages[-1].instructions if op == "COPY"]
    assert copies and all(c.startswith("--from=") for c in copies)


def test_entry_points_exist(image: str) -> None:
    _, stages = parse(DOCKERFILES[image])
    scripts = PYPROJECT["project"]["scripts"]
    entry = [rest for op, rest in stages[-1].instructions if op == "ENTRYPOINT"]
    assert entry, f"{image}: no ENTRYPOINT"
    argv = json.loads(entry[-1])  # exec form: no shell, signals reach the process
    assert argv[0] in scripts, f"{image}: {argv[0]} is not a [project.scripts] entry point"
    module, _, func = scripts[argv[0]].partition(":")
    src_root = "operator" if module.startswith("distgnn_operator") else "runtime"
    mod_path = REPO / src_root / Path(*module.split("."))
    source = mod_path.with_suffix(".py")
    if not source.exists():
        pytest.fail(f"{scripts[argv[0]]}: {source.relative_to(REPO)} does not exist yet")
    assert re.search(rf"^def {func}\(", source.read_text(), re.M), f"{func} not in {source}"


def test_expected_entry_points() -> None:
    wanted = {"operator": "distgnn-operator", "runtime": "distgnn"}
    for image, script in wanted.items():
        _, stages = parse(DOCKERFILES[image])
        entry = next(rest for op, rest in stages[-1].instructions if op == "ENTRYPOINT")
        assert json.loads(entry)[0] == script


def test_base_images_are_python_311_slim() -> None:
    for image, key in (("operator", "PYTHON_IMAGE"), ("runtime", "BASE_IMAGE")):
        global_args, stages = parse(DOCKERFILES[image])
        assert global_args[key] == "python:3.11-slim"
        for stage in stages:
            assert expand(stage.base, global_args) == "python:3.11-slim", image


def test_no_secrets_in_images(image: str) -> None:
    global_args, stages = parse(DOCKERFILES[image])
    names = list(global_args)
    for stage in stages:
        for op, rest in stage.instructions:
            if op in {"ARG", "ENV"}:
                names += re.findall(r"(\w+)=", rest) or [rest.split()[0]]
    for name in names:
        assert not re.search(r"SECRET|PASSWORD|TOKEN|ACCESS_KEY|CREDENTIAL", name, re.I), name
    text = DOCKERFILES[image].read_text()
    assert ".env" not in re.findall(r"COPY\s+(\S+)", text)
    assert "--mount=type=secret" not in text or "id=" in text


def _reqs(lines: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in lines:
        req = Requirement(line)
        out[req.name.lower()] = str(req.specifier)
    return out


def test_operator_requirements_match_the_operator_extra() -> None:
    text = (IMAGES / "operator" / "requirements.txt").read_text().splitlines()
    lines = [ln.split("#")[0].strip() for ln in text]
    reqs = _reqs([ln for ln in lines if ln])
    extra = _reqs(PYPROJECT["project"]["optional-dependencies"]["operator"])
    assert reqs == extra
    assert "torch" not in reqs


def test_operator_image_installs_project_without_deps() -> None:
    _, stages = parse(DOCKERFILES["operator"])
    runs = " ".join(rest for s in stages for op, rest in s.instructions if op == "RUN")
    assert re.search(r"pip install --no-deps \.", runs)
    assert re.search(r"pip install -r \S*requirements\.txt", runs)
    assert "torch" not in runs


def _torch_pin(text: str) -> str:
    pins = set(re.findall(r"torch==([0-9][0-9.]*[0-9])", text))
    assert len(pins) == 1, pins
    return pins.pop()


def test_torch_pin_is_consistent() -> None:
    global_args, stages = parse(DOCKERFILES["runtime"])
    build_args = {**global_args, **stage_args(stages[0])}
    pinned = build_args["TORCH_VERSION"]
    assert _torch_pin((REPO / "scripts" / "dev-install.sh").read_text()) == pinned
    readme = REPO / "README.md"
    if readme.exists() and "torch==" in readme.read_text():
        assert _torch_pin(readme.read_text()) == pinned
    torch_req = next(
        Requirement(r) for r in PYPROJECT["project"]["dependencies"] if r.startswith("torch")
    )
    assert Version(pinned) in torch_req.specifier
    assert build_args["TORCH_INDEX_URL"] == "https://download.pytorch.org/whl/cpu"
    runs = " ".join(rest for op, rest in stages[0].instructions if op == "RUN")
    assert '"torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX_URL}"' in runs
    # torch is installed before the project, so that pip never replaces it with another build.
    assert runs.index("torch==") < runs.index('pip install ".[parquet]"')


def test_dockerignore_excludes_what_images_never_need() -> None:
    for rel in ("tests", ".git", ".tools", ".pytest_cache", ".mypy_cache", "runtime/x/__pycache__"):
        assert ignored(rel), f".dockerignore should exclude {rel}"
    for rel in ("runtime", "operator", "pyproject.toml", "README.md", "images/operator"):
        assert not ignored(rel), f".dockerignore must keep {rel}"
