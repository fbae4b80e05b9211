"""The environment of a CLI process under test that sees no AWS settings of the caller."""

from __future__ import annotations

import os


def isolated_env(drop: tuple[str, ...] = ("AWS_",), **extra: str) -> dict[str, str]:
    """This process's environment less the variables starting with ``drop``, with no AWS
    config or credentials files, no instance metadata and a fixed region; then ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(
        HOME=env.get("HOME", "/tmp"),
        AWS_CONFIG_FILE="/nonexistent/aws-config",
        AWS_SHARED_CREDENTIALS_FILE="/nonexistent/aws-credentials",
        AWS_EC2_METADATA_DISABLED="true",
        AWS_DEFAULT_REGION="us-east-1",
    )
    env.update(extra)
    return env
