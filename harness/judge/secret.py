"""The instructor's grading secret: hidden cases are drawn from it, so it must never reach students.

Read from the environment variable `HARNESS_GRADING_SECRET` (hex), else from a file (default
`~/.config/harness/grading-secret`, or `$XDG_CONFIG_HOME/harness/grading-secret`), created with 32 random
bytes and mode 0600 the first time it is missing. Keep the file: the same secret regrades a class to the
same hidden cases, so grades are reproducible.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

SECRET_VARIABLE = "HARNESS_GRADING_SECRET"


def default_path() -> Path:
    """Where the secret file lives when no path is given."""
    config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return config / "harness" / "grading-secret"


def load_or_create(path: Path | None = None) -> tuple[bytes, str]:
    """The grading secret and a sentence saying where it came from (created when missing).

    Raises:
        ValueError: the variable or the file holds no usable secret (not hex, or under 16 bytes).
    """
    if os.environ.get(SECRET_VARIABLE):
        return _parse(os.environ[SECRET_VARIABLE], f"${SECRET_VARIABLE}"), f"grading secret from ${SECRET_VARIABLE}"
    path = path or default_path()
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(secrets.token_hex(32) + "\n")
        return _parse(path.read_text(), str(path)), (f"created a new grading secret in {path} (keep it private and "
                                                     "keep it: the same secret regrades to the same hidden cases)")
    return _parse(path.read_text(), str(path)), f"grading secret from {path}"


def _parse(text: str, where: str) -> bytes:
    try:
        secret = bytes.fromhex(text.strip())
    except ValueError:
        raise ValueError(f"the grading secret in {where} is not hex: write 64 hex digits there, or delete the file "
                         "to have a new one created") from None
    if len(secret) < 16:
        raise ValueError(f"the grading secret in {where} is shorter than 16 bytes: use 64 hex digits")
    return secret
