"""A JupyterHub classroom on this machine, for tests/test_hub_classroom.py.

`requirements_met` says what is missing to run one (root, useradd, Chromium, node, the pinned proxy from
`make hub`); `class_users` makes throwaway system users with passwords and always removes them, homes included;
`running_hub` serves hub/jupyterhub_config.py, unchanged, on free localhost ports and always stops it and every
server it started; `as_user` runs a command as one of the users (the instructor's nbgrader and harness commands).

Every user runs this repository's Python. Where that Python or the repository lies below a folder closed to
other users (a pyenv under /root, a clone made with mktemp -d), the hub and the instructor's commands run in a
private mount namespace that shows each such folder open, holding only the way to what they need.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import psutil
import pytest
from browser_lab import stop_process_group

REPO_ROOT = Path(__file__).resolve().parents[1]
HUB_DIR = REPO_ROOT / "hub"
PROXY = HUB_DIR / "node_modules" / ".bin" / "configurable-http-proxy"
START_TIMEOUT_S = 90


def requirements_met() -> str | None:
    """What this machine lacks to run a hub classroom (None when nothing): each with what to do."""
    if os.geteuid() != 0:
        return "the hub classroom test makes system users and runs JupyterHub as root: run it as root"
    tools = ("useradd", "userdel", "chpasswd", "setpriv", "unshare", "node")
    missing = [tool for tool in tools if not shutil.which(tool)]
    if missing:
        return f"the hub classroom test needs {', '.join(missing)} (node: apt-get install nodejs npm)"
    if not PROXY.exists():
        return f"configurable-http-proxy is not installed in {HUB_DIR}: run `make hub` (npm ci in hub/)"
    if not (Path(sys.executable).parent / "jupyterhub-singleuser").exists():
        return "jupyterhub is not installed in this environment: run `make` (requirements.txt pins it)"
    return None


@dataclass(frozen=True)
class User:
    """A throwaway system user: name, password, home folder, uid and gid."""

    name: str
    password: str
    home: Path
    uid: int
    gid: int


@contextlib.contextmanager
def class_users(roles: list[str]) -> Iterator[dict[str, User]]:
    """System users named `<unique prefix>-<role>`, one per role, with random passwords and homes.

    They are removed with their homes (userdel -r) on exit, whatever happened, after their processes are killed.
    """
    prefix = f"lab{secrets.token_hex(3)}"
    made: list[str] = []
    try:
        users = {}
        for role in roles:
            name = f"{prefix}-{role}"
            subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True, capture_output=True)
            made.append(name)
            password = secrets.token_urlsafe(12)
            subprocess.run(["chpasswd"], input=f"{name}:{password}\n", text=True, check=True, capture_output=True)
            entry = pwd.getpwnam(name)
            users[role] = User(name, password, Path(entry.pw_dir), entry.pw_uid, entry.pw_gid)
        yield users
    finally:
        for name in made:
            with contextlib.suppress(KeyError):
                uid = pwd.getpwnam(name).pw_uid
                for process in psutil.process_iter(["uids"]):
                    if process.info["uids"] and process.info["uids"].real == uid:
                        with contextlib.suppress(psutil.NoSuchProcess):
                            process.kill()
            subprocess.run(["userdel", "--remove", "--force", name], capture_output=True, check=False)


def reachable_prefix(view_root: Path) -> list[str]:
    """A command prefix under which every user reaches this Python and this repository (see the module's doc).

    Each outermost folder closed to others (no search permission for others) above sys.base_prefix, sys.prefix or the
    repository is shown, in a private mount namespace, as a folder of `view_root` open to all that holds only the
    entries leading to them; empty when nothing is closed.
    """
    closed_folders: dict[Path, set[str]] = {}
    for target in (Path(sys.base_prefix), Path(sys.prefix), REPO_ROOT):
        closed = next((p for p in reversed(target.parents) if p.stat().st_mode & 0o001 == 0), None)
        if closed is not None:
            closed_folders.setdefault(closed, set()).add(target.relative_to(closed).parts[0])
    mounts = []
    for index, (closed, entries) in enumerate(sorted(closed_folders.items())):
        view = view_root / f"view{index}"
        for inside in sorted(entries):
            (view / inside).mkdir(parents=True, exist_ok=True)
            mounts.append(f'mount --bind "{closed / inside}" "{view / inside}"')
        view.chmod(0o711)
        mounts.append(f'mount --rbind "{view}" "{closed}"')
    if not mounts:
        return []
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", " && ".join([*mounts, 'exec "$@"']), "sh"]


def as_user(user: User, command: list[str], cwd: Path, prefix: list[str],
            timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `command` as `user` (their groups, a clean environment, this Python's bin first on PATH) in `cwd`."""
    env = [f"HOME={user.home}", f"USER={user.name}", f"LOGNAME={user.name}", "OMP_NUM_THREADS=1",
           f"PATH={Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin"]
    setpriv = ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--init-groups", "env", "-i", *env]
    return subprocess.run([*prefix, *setpriv, *command], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def _free_ports(count: int) -> list[int]:
    """`count` distinct localhost ports free right now."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass(frozen=True)
class Hub:
    """A running hub: the URL students open (ending in /) and its log (the proxy's and the servers' too)."""

    url: str
    log: Path


def _answering(url: str) -> bool:
    """True when the hub answers its API's root."""
    try:
        with urllib.request.urlopen(f"{url}hub/api/", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def running_hub(state: Path, instructors: list[str], students: list[str], exchange: Path,
                prefix: list[str]) -> Iterator[Hub]:
    """JupyterHub with hub/jupyterhub_config.py, its settings from the environment as the README shows them.

    `state` holds its database, cookie secret and log (hub.log); it serves on a free localhost port.
    """
    public, api, proxy_api = _free_ports(3)
    url = f"http://127.0.0.1:{public}/"
    env = dict(os.environ, HUB_INSTRUCTORS=",".join(instructors), HUB_STUDENTS=",".join(students),
               HUB_EXCHANGE=str(exchange), HUB_STATE_DIR=str(state), HUB_BIND_URL=url,
               HUB_API_URL=f"http://127.0.0.1:{api}", HUB_PROXY_API_URL=f"http://127.0.0.1:{proxy_api}")
    state.mkdir(parents=True, exist_ok=True)
    log = state / "hub.log"
    command = [*prefix, str(Path(sys.executable).parent / "jupyterhub"), "-f", str(HUB_DIR / "jupyterhub_config.py")]
    with log.open("w") as output:
        process = subprocess.Popen(command, cwd=state, env=env, stdout=output, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _answering(url):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"JupyterHub did not start (exit code {process.poll()}):\n{log.read_text()[-4000:]}")
            time.sleep(0.5)
        yield Hub(url, log)
    finally:
        stop_process_group(process, grace_s=30)
