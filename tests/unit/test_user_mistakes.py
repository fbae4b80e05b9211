"""A new user's common mistakes end in one clear line naming what to fix (exit 2 on the
command line), never in argparse's usage block or a traceback from deep inside."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from distgnn import cli, storage
from distgnn.api import parse_job
from distgnn.contract import TrainerEnv
from distgnn.errors import (
    ConfigError,
    GraphFormatError,
    RequestTimeout,
    ServerUnavailable,
    StorageError,
)
from distgnn.local.runner import root_cause
from distgnn.sampling import LocalGraph
from distgnn.sampling.source import LocalSource
from distgnn.train import link_prediction, node_classification
from distgnn.train.config import TrainConfig
from distgnn.train.ddp import init_ddp
from distgnn.train.graph import TrainGraph


def one_error_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run ``distgnn ARGV`` in-process; it must exit 2 with exactly one stderr line."""
    with pytest.raises(SystemExit) as ei:
        cli.main(argv)
    assert ei.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.strip()


def test_a_mistyped_subcommand_names_the_closest_one(capsys: pytest.CaptureFixture[str]) -> None:
    line = one_error_line(capsys, ["partiton", "g.npz"])
    assert line.startswith("distgnn: error: argument COMMAND: invalid choice: 'partiton'")
    assert "did you mean 'partition'?" in line and "see 'distgnn --help'" in line


def test_a_mistyped_choice_of_a_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    line = one_error_line(capsys, ["train", "node-clasification"])
    assert line.startswith("distgnn train: error: argument app: invalid choice")
    assert "did you mean 'node-classification'?" in line


def test_a_mistyped_option_is_named_by_its_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    line = one_error_line(capsys, ["train", "node-classification", "--epohcs", "3"])
    assert line.startswith("distgnn train: error: unrecognized arguments: --epohcs 3")
    assert "did you mean '--epochs'?" in line and "see 'distgnn train --help'" in line


def test_a_missing_required_option_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    line = one_error_line(capsys, ["partition", "g.npz", "--num-parts", "2"])
    assert line == (
        "distgnn partition: error: the following arguments are required: --out, --name; "
        "see 'distgnn partition --help'"
    )


def _job(**trainers: Any) -> dict[str, Any]:
    return {
        "apiVersion": "distgnn.dev/v1alpha1",
        "kind": "DistGNNJob",
        "metadata": {"name": "j"},
        "spec": {
            "graph": {"source": {"url": "g.npz"}},
            "partitioning": {"num_parts": 2},
            "trainers": {"app": {"name": "node-classification"}, **trainers},
        },
    }


def test_a_mistyped_manifest_field_names_the_field_it_meant() -> None:
    with pytest.raises(ConfigError) as ei:
        parse_job(_job(replicaz=2))
    msg = str(ei.value)
    assert "spec.trainers.replicaz: unknown field (did you mean 'replicas'?" in msg
    # snake_case for camelCase: the same name, spelled as the schema does
    assert "spec.partitioning.num_parts: unknown field (did you mean 'numParts'?" in msg


def test_an_unrelated_unknown_field_gets_no_guess() -> None:
    with pytest.raises(ConfigError, match=r"spec\.trainers\.colour: unknown field \(known:"):
        parse_job(_job(colour="red"))


def test_a_missing_relative_dataset_says_how_it_was_resolved(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's job in a checkout without ``../shared`` beside it."""
    job = _job()
    job["spec"]["graph"]["source"]["url"] = "../../shared/datasets/cora.npz"
    job["spec"]["partitioning"] = {"numParts": 2}
    (tmp_path / "a" / "b").mkdir(parents=True)
    path = tmp_path / "a" / "b" / "job.yaml"
    path.write_text(yaml.safe_dump(job), encoding="utf-8")
    assert cli.main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (
        f"distgnn run: error: spec.graph.source.url: {tmp_path / 'shared/datasets/cora.npz'} "
        "does not exist (a relative path in a manifest is resolved against the manifest's "
        "folder)"
    )


@pytest.mark.parametrize("manager", ["kueue.x-k8s.io/multikueue", "example.com/other"])
def test_a_job_another_controller_manages_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], manager: str
) -> None:
    """A MultiKueue job (spec.managedBy) runs on a worker cluster, never here:
    one line naming its controller, exit 2, before anything is resolved or started."""
    job = _job()
    job["spec"]["partitioning"] = {"numParts": 2}
    job["spec"]["managedBy"] = manager
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job), encoding="utf-8")
    assert cli.main(["run", str(path), "--workdir", str(tmp_path / "w")]) == 2
    assert capsys.readouterr().err == (
        f"distgnn run: error: spec.managedBy: job 'j' is managed by {manager}, "
        "not by DistGNN (distgnn.dev/operator); distgnn run runs only jobs DistGNN manages "
        "(leave the field out to run it here)\n"
    )
    assert not (tmp_path / "w").exists()
    # naming DistGNN itself is the same as leaving it out: the run goes on (to the graph)
    job["spec"]["managedBy"] = "distgnn.dev/operator"
    path.write_text(yaml.safe_dump(job), encoding="utf-8")
    assert cli.main(["run", str(path), "--workdir", str(tmp_path / "w")]) == 2
    assert "g.npz does not exist" in capsys.readouterr().err


def test_a_manifest_path_typed_in_another_folder_names_that_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``distgnn run examples/cora-graphsage.yaml`` typed outside the checkout."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "examples/cora-graphsage.yaml"]) == 2
    assert capsys.readouterr().err == (
        "distgnn run: error: examples/cora-graphsage.yaml: cannot read the manifest (No such "
        f"file or directory); a relative path is taken from the current folder, {tmp_path}\n"
    )
    # an absolute path needs no such hint
    assert cli.main(["run", str(tmp_path / "job.yaml")]) == 2
    assert capsys.readouterr().err.endswith(
        "job.yaml: cannot read the manifest (No such file or directory)\n"
    )


def test_a_graph_its_prepare_script_has_not_written_yet_names_the_script(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The examples/dgl manifests run before ``python examples/dgl/prepare_data.py``."""
    example = tmp_path / "examples" / "dgl"
    example.mkdir(parents=True)
    (example / "prepare_data.py").write_text('np.savez(out / "cora-hetero.npz")\n')
    job = _job()
    job["spec"]["graph"]["source"]["url"] = "data/cora-hetero.npz"
    job["spec"]["partitioning"] = {"numParts": 2}
    (example / "job.yaml").write_text(yaml.safe_dump(job), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "examples/dgl/job.yaml"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (
        f"distgnn run: error: spec.graph.source.url: {example / 'data/cora-hetero.npz'} "
        "does not exist (a relative path in a manifest is resolved against the manifest's "
        "folder); `python examples/dgl/prepare_data.py` writes it"
    )
    # a script that does not name the file is no hint
    job["spec"]["graph"]["source"]["url"] = "data/other.npz"
    (example / "job.yaml").write_text(yaml.safe_dump(job), encoding="utf-8")
    assert cli.main(["run", "examples/dgl/job.yaml"]) == 2
    assert capsys.readouterr().err.strip().endswith("against the manifest's folder)")


def _graph() -> TrainGraph:
    rng = np.random.default_rng(0)
    n = 60
    src, dst = rng.integers(0, n, 300), rng.integers(0, n, 300)
    masks = {k: rng.random(n) < 0.3 for k in ("train_mask", "val_mask", "test_mask")}
    feat = rng.random((n, 4), dtype=np.float32)
    g = LocalGraph(src, dst, n, {"feat": feat, "label": rng.integers(0, 3, n), **masks})
    return TrainGraph(g, LocalSource(g))


@pytest.mark.parametrize(
    ("option", "field"),
    [
        ("--feat (trainers.app.feat)", {"feat": "features"}),
        ("--label (trainers.app.label)", {"label": "labels"}),
        ("--val-mask (trainers.app.valMask)", {"val_mask": "valid_mask"}),
    ],
)
def test_a_missing_node_field_names_the_option_at_start(option: str, field: dict[str, str]) -> None:
    cfg = TrainConfig(epochs=1, fanouts=[2, 2], **field).validate()  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as ei:
        node_classification.run(cfg, _graph(), init_ddp(TrainerEnv(0, 1, "127.0.0.1", 1)))
    (name,) = field.values()
    assert str(ei.value) == (
        f"{option}: node data {name!r} not found in the graph "
        "(it has: feat, label, test_mask, train_mask, val_mask)"
    )


def test_link_prediction_names_a_missing_feature_field() -> None:
    cfg = TrainConfig(app="link-prediction", epochs=1, fanouts=[2, 2], feat="x").validate()
    with pytest.raises(ConfigError, match=r"^--feat \(trainers\.app\.feat\): node data 'x'"):
        link_prediction.run(cfg, _graph(), init_ddp(TrainerEnv(0, 1, "127.0.0.1", 1)))


def test_a_trainers_json_root_cause_becomes_one_line() -> None:
    rec = {"error": "ConfigError", "message": "--feat: no", "rank": "1", "traceback": "T\nB"}
    assert root_cause(json.dumps(rec)) == "ConfigError: --feat: no"
    assert root_cause("RuntimeError: plain text") == "RuntimeError: plain text"
    assert root_cause('["not", "a record"]') == '["not", "a record"]'


def test_output_piped_into_a_closed_reader_ends_quietly(tmp_path: Path) -> None:
    """``distgnn inspect ... | head``: the reader goes away; no BrokenPipeError traceback."""
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "g.npz", src=rng.integers(0, 50, 200), dst=rng.integers(0, 50, 200))
    argv = ["partition", str(tmp_path / "g.npz"), "--num-parts", "2", "--out", str(tmp_path)]
    assert cli.main([*argv, "--name", "g"]) == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "distgnn.cli", "inspect", str(tmp_path / "g.json")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # before the command has written anything
    err = proc.communicate(timeout=120)[1].decode()
    assert proc.returncode == 141, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_inspect_given_the_output_folder_names_its_manifest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``distgnn inspect OUT`` (the ``--out`` just typed) or ``OUT/NAME``, not OUT/NAME.json."""
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "g.npz", src=rng.integers(0, 50, 200), dst=rng.integers(0, 50, 200))
    out = tmp_path / "parts"
    argv = ["partition", str(tmp_path / "g.npz"), "--num-parts", "2", "--out", str(out)]
    assert cli.main([*argv, "--name", "g"]) == 0
    capsys.readouterr()
    for folder in (out, out / "g"):
        assert cli.main(["inspect", str(folder)]) == 2
        assert capsys.readouterr().err == (
            f"distgnn inspect: error: {folder}: a folder, not a partition manifest "
            f"(OUT/NAME.json); try {out / 'g.json'}\n"
        )
    assert cli.main(["inspect", str(out / "g.json")]) == 0


def test_an_unknown_log_level_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    line = one_error_line(capsys, ["--log-level", "verbose", "inspect", "g.json"])
    assert "argument --log-level: invalid choice: 'VERBOSE'" in line
    monkeypatch.setenv("DISTGNN_LOG_LEVEL", "loud")
    assert cli.main(["inspect", "g.json"]) == 2
    assert capsys.readouterr().err == (
        "distgnn inspect: error: DISTGNN_LOG_LEVEL: unknown log level 'LOUD' "
        "(use DEBUG, INFO, WARNING, ERROR)\n"
    )


@pytest.mark.parametrize("flag", ["--grace", "--ready-timeout"])
def test_run_refuses_negative_or_nan_seconds(capsys: pytest.CaptureFixture[str], flag: str) -> None:
    for bad in ("-1", "nan"):
        line = one_error_line(capsys, ["run", "job.yaml", flag, bad])
        assert f"argument {flag}: must be a non-negative number of seconds: '{bad}'" in line


@pytest.mark.parametrize("var", ["RANK", "WORLD_SIZE", "MASTER_PORT", "LOCAL_RANK"])
def test_a_non_integer_rank_variable_is_named(var: str) -> None:
    env = {"JOB_COMPLETION_INDEX": "1", "DISTGNN_TRAINERS_PER_POD": "2", var: "x"}
    with pytest.raises(ConfigError, match=rf"^{var}='x' is not an integer$"):
        TrainerEnv.from_env(env)


def test_prepare_data_without_cora_names_the_option(tmp_path: Path, repo_root: Path) -> None:
    script = repo_root / "examples" / "dgl" / "prepare_data.py"
    missing = tmp_path / "cora.npz"
    out = subprocess.run(
        [sys.executable, str(script), "--cora", str(missing), "--out", str(tmp_path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert out.stderr.splitlines()[-1] == (
        f"prepare_data.py: error: --cora: {missing} does not exist "
        "(the shared datasets beside the checkout)"
    )
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("flag", ["--port", "--health-port"])
def test_serve_on_a_port_in_use_is_one_line(tmp_path: Path, flag: str) -> None:
    import socket

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "g.npz", src=rng.integers(0, 50, 200), dst=rng.integers(0, 50, 200))
    argv = ["partition", str(tmp_path / "g.npz"), "--num-parts", "1", "--out", str(tmp_path)]
    assert cli.main([*argv, "--name", "g"]) == 0
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        ports = {"--port": "0", "--health-port": "0", flag: str(port)}
        out = subprocess.run(
            [sys.executable, "-m", "distgnn.cli", "serve", "--manifest", str(tmp_path / "g.json"),
             "--part-id", "0", "--insecure-no-token", "--bind", "127.0.0.1",
             "--port", ports["--port"], "--health-port", ports["--health-port"]],
            check=False, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert out.returncode == 2, out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("distgnn serve: error: cannot bind ") and f"{port}" in last
    assert "Address already in use" in last and "Traceback" not in out.stderr


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (ConfigError("--feat (trainers.app.feat): no such node field"), 2),
        (ServerUnavailable("graph server 127.0.0.1:1 is gone"), 1),
        (RequestTimeout("no answer in 30s"), 1),
    ],
)
def test_a_trainer_exits_2_only_for_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    error: Exception,
    status: int,
) -> None:
    """Exit 2 from ``distgnn train`` is never retried, so a lost server or a timeout (which
    a restart can cure) exits 1; both are one line."""
    from distgnn.train import cli as train_cli

    def fail(args: Any) -> int:
        raise error

    monkeypatch.setattr(train_cli, "_run", fail)
    monkeypatch.delenv("DISTGNN_TERMINATION_LOG", raising=False)
    assert cli.main(["train", "node-classification"]) == status
    assert capsys.readouterr().err == f"distgnn train: error: {error}\n"


def test_a_module_missing_for_distgnn_train_exits_2_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """No restart installs a module (an image without torch, say): exit 2, which the
    operator and distgnn run do not retry, with the termination log's record; an
    ImportError of another kind (a shared library this node lacks) stays a traceback,
    exit 1 (retried: another node may have it)."""
    from distgnn.train import cli as train_cli

    def missing(args: Any) -> int:
        raise ModuleNotFoundError("No module named 'torch'", name="torch")

    term = tmp_path / "termination-log"
    monkeypatch.setattr(train_cli, "_run", missing)
    monkeypatch.setenv("DISTGNN_TERMINATION_LOG", str(term))
    assert cli.main(["train", "node-classification"]) == 2
    assert capsys.readouterr().err == (
        f"distgnn train: error: No module named 'torch' (not installed for {sys.executable})\n"
    )
    rec = json.loads(term.read_text(encoding="utf-8"))
    assert (rec["error"], rec["message"]) == ("ModuleNotFoundError", "No module named 'torch'")

    def no_library(args: Any) -> int:
        raise ImportError("libcuda.so.1: cannot open shared object file")

    monkeypatch.setattr(train_cli, "_run", no_library)
    with pytest.raises(ImportError):  # the interpreter's traceback and exit 1
        cli.main(["train", "node-classification"])


class EndpointConnectionError(Exception):
    """Named as botocore's: what the object-store client raises for an unreachable endpoint."""


class NoCredentialsError(Exception):
    """Named as botocore's: no credential provider found any credentials."""


class CredentialRetrievalError(Exception):
    """Named as botocore's: a credential provider (instance metadata, web identity) failed."""


def _storage_error(cause: BaseException) -> StorageError:
    """A StorageError as :func:`distgnn.storage.errors_for` raises it, from ``cause``."""
    try:
        with storage.errors_for("s3://graphs/cora.npz"):
            raise cause
    except StorageError as e:
        return e
    raise AssertionError("errors_for raised nothing")


@pytest.mark.parametrize(
    ("make_error", "status"),
    [
        (lambda: ConfigError("--num-parts: must be >= 1"), 2),
        (lambda: GraphFormatError("cora.npz: no 'src' array"), 2),
        (lambda: _storage_error(FileNotFoundError(2, "No such file or directory")), 2),
        (lambda: _storage_error(EndpointConnectionError("http://minio:9000")), 1),
        (lambda: _storage_error(PermissionError(13, "Permission denied")), 1),
        (lambda: _storage_error(NoCredentialsError("Unable to locate credentials")), 2),
        (lambda: _storage_error(CredentialRetrievalError("web identity")), 1),
        (lambda: EndpointConnectionError("no DistGNN error names it"), 1),
    ],
)
def test_the_partitioner_exits_2_only_for_what_a_retry_cannot_fix(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    make_error: Any,
    status: int,
) -> None:
    """``distgnn partition`` exits 2 for a mistake (an option, an input graph that does not
    exist or is malformed), which the operator's partitioning Job does not retry (its
    podFailurePolicy), and 1 for object storage unreachable or refusing the credentials,
    which a retry can cure; both are one line."""
    from distgnn.partition import cli_partition

    error = make_error()

    def fail(args: Any) -> int:
        raise error

    monkeypatch.setattr(cli_partition, "main", fail)
    argv = ["partition", "s3://graphs/cora.npz", "--num-parts", "2", "--out", "x", "--name", "g"]
    assert cli.main(argv) == status
    err = capsys.readouterr().err
    assert err.startswith("distgnn partition: error: ") and err.count("\n") == 1, err


def test_a_missing_input_graph_exits_2(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "distgnn.cli", "partition", str(tmp_path / "nope.npz"),
         "--num-parts", "2", "--out", str(tmp_path / "out"), "--name", "g"],
        check=False, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1].startswith("distgnn partition: error: ")
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    ("out", "why"),
    [
        ("/proc/x", "cannot create the folder: No such file or directory"),
        ("file:///proc/x", "cannot create the folder: No such file or directory"),
        ("{tmp}/a-file/out", "cannot create the folder: Not a directory"),
        ("{tmp}/a-file", "not a folder"),
        ("/proc", "cannot create a file there: "),
    ],
)
def test_an_output_location_that_cannot_be_written_is_named_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], out: str, why: str
) -> None:
    """``--out`` that cannot be written ends in one line saying so (exit 2), before the
    graph is read (the graph here does not even exist), not in a write of some partition
    file reported as ``indptr.npy: not found``."""
    (tmp_path / "a-file").write_text("x")
    out = out.format(tmp=tmp_path)
    argv = ["partition", str(tmp_path / "nope.npz"), "--num-parts", "2", "--out", out]
    assert cli.main([*argv, "--name", "g"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    line = err.strip()
    assert line.startswith(f"distgnn partition: error: {out}: the output location cannot be ")
    assert why in line and "indptr" not in line


def test_the_write_check_leaves_nothing_behind(tmp_path: Path) -> None:
    storage.check_writable_folder(str(tmp_path / "new" / "parts"))
    assert list(tmp_path.iterdir()) == []  # the folders it made are gone again
    (tmp_path / "there").mkdir()
    storage.check_writable_folder(str(tmp_path / "there"))
    assert list((tmp_path / "there").iterdir()) == []
    storage.check_writable_folder("s3://bucket/parts")  # remote: not checked (no write)


def test_the_write_check_survives_a_concurrent_check_removing_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two trainers check one new output folder at once: the other's check removes the
    folder it made before this one's probe file goes in (ENOENT). The folder is made and
    tried again; a folder that keeps vanishing is still one clear error."""
    import os
    import tempfile

    real = tempfile.mkstemp
    calls: list[str] = []

    def vanished_once(*a: Any, **k: Any) -> tuple[int, str]:
        calls.append(k["dir"])
        if len(calls) == 1:
            os.rmdir(k["dir"])  # the other check's clean-up came first
            raise FileNotFoundError(2, "No such file or directory")
        return real(*a, **k)

    monkeypatch.setattr(tempfile, "mkstemp", vanished_once)
    storage.check_writable_folder(str(tmp_path / "out"))
    assert len(calls) == 2 and list(tmp_path.iterdir()) == []

    def always(*a: Any, **k: Any) -> tuple[int, str]:
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(tempfile, "mkstemp", always)
    with pytest.raises(ConfigError, match="cannot create a file there: No such file"):
        storage.check_writable_folder(str(tmp_path / "out"))
    assert list(tmp_path.iterdir()) == []


def test_a_failed_partition_write_says_it_was_a_write(tmp_path: Path) -> None:
    from distgnn.partition.writer import PartWriter

    (tmp_path / "f").write_text("x")
    w = PartWriter(str(tmp_path / "f"), "part-00000")
    with pytest.raises(StorageError) as ei:
        w.write("graph/indptr.npy", np.arange(3))
    assert str(ei.value).startswith(f"cannot write {tmp_path}/f/part-00000/graph/indptr.npy: ")


@pytest.mark.parametrize("name", ["cora.json", "cora.npz"])
def test_a_manifest_variable_naming_nothing_is_named(tmp_path: Path, name: str) -> None:
    from distgnn.errors import StorageNotFound
    from distgnn.train.graph import open_train_graph

    missing = str(tmp_path / "nope" / name)
    with pytest.raises(StorageNotFound) as ei:
        open_train_graph({"DISTGNN_MANIFEST": missing})
    assert str(ei.value) == f"DISTGNN_MANIFEST: {missing}: not found"


def test_scoring_a_folder_without_inference_output_says_what_is_missing(
    tmp_path: Path,
) -> None:
    from distgnn.errors import StorageNotFound
    from distgnn.train.infer_output import read_index

    with pytest.raises(StorageNotFound, match="holds no complete inference output") as ei:
        read_index(str(tmp_path))
    assert "index.json: not found" in str(ei.value)
