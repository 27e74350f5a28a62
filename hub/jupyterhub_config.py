"""JupyterHub for a classroom of PyTorch Training Lab: `jupyterhub -f hub/jupyterhub_config.py`, as root.

Every user is a system user of this machine who logs in with their own password (PAM); their JupyterLab runs as
them (LocalProcessSpawner), from this repository's .venv, in their home folder. Students get the student tree's
JupyterLab (no Formgrader, Create Assignment or Course List: harness/grading/student_template/.jupyter); the
instructors get all of nbgrader's. Both find nbgrader's exchange and the course id in hub/jupyter/nbgrader_config.py.
tests/test_hub_classroom.py runs this file as it is, with the settings below given as environment variables.

The settings a real class changes (environment variables, read when the hub starts):
    HUB_INSTRUCTORS    comma-separated user names: the hub's admins, with nbgrader's instructor tools
    HUB_STUDENTS       comma-separated user names allowed to log in besides the instructors
    HUB_EXCHANGE       nbgrader's exchange, a folder every user can write (mode 1777): /srv/nbgrader/exchange
    HUB_STATE_DIR      the hub's database, cookie secret and proxy pid file: /srv/jupyterhub
    HUB_BIND_URL       where students open the hub: http://:8000 (every address, port 8000)
    HUB_API_URL        the hub's own API, for the proxy and the users' servers: http://127.0.0.1:8081
    HUB_PROXY_API_URL  configurable-http-proxy's API: http://127.0.0.1:8001
Behind a public address, put TLS in front (c.JupyterHub.ssl_key and ssl_cert, or a reverse proxy).
"""

import os
from pathlib import Path

c = get_config()  # noqa: F821 (provided by JupyterHub)

HUB_DIR = Path(__file__).resolve().parent
REPO = HUB_DIR.parent
VENV_BIN = REPO / ".venv" / "bin"  # every user must be able to run it: the repository and its Python readable by all
STUDENT_JUPYTER = REPO / "harness" / "grading" / "student_template" / ".jupyter"


def _names(variable: str) -> set[str]:
    """The user names in the comma-separated environment variable `variable`."""
    return {name.strip() for name in os.environ.get(variable, "").split(",") if name.strip()}


instructors = _names("HUB_INSTRUCTORS")
state = Path(os.environ.get("HUB_STATE_DIR", "/srv/jupyterhub"))
state.mkdir(mode=0o700, parents=True, exist_ok=True)

# Who: system users with their passwords; only the class logs in.
c.JupyterHub.authenticator_class = "pam"
c.Authenticator.admin_users = instructors
c.Authenticator.allowed_users = instructors | _names("HUB_STUDENTS")

# Where: the public address, the hub's API and the proxy's (the pinned configurable-http-proxy in hub/, `make hub`).
c.JupyterHub.bind_url = os.environ.get("HUB_BIND_URL", "http://:8000")
c.JupyterHub.hub_bind_url = os.environ.get("HUB_API_URL", "http://127.0.0.1:8081")
c.ConfigurableHTTPProxy.api_url = os.environ.get("HUB_PROXY_API_URL", "http://127.0.0.1:8001")
c.ConfigurableHTTPProxy.command = [str(HUB_DIR / "node_modules" / ".bin" / "configurable-http-proxy")]
c.ConfigurableHTTPProxy.pid_file = str(state / "jupyterhub-proxy.pid")
c.JupyterHub.db_url = f"sqlite:///{state / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(state / "jupyterhub_cookie_secret")

# Each user's JupyterLab: this environment's, as that user, in their home folder.
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [str(VENV_BIN / "jupyterhub-singleuser")]
c.Spawner.notebook_dir = "~"
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = 120  # a loaded classroom machine starts JupyterLab slowly
c.Spawner.http_timeout = 120


def _jupyter_config_path(spawner) -> str:
    """Where a user's JupyterLab reads nbgrader's settings (and, for a student, the student tree's JupyterLab)."""
    folders = [HUB_DIR / "jupyter"] + ([] if spawner.user.name in instructors else [STUDENT_JUPYTER])
    return os.pathsep.join(str(folder) for folder in folders)


c.Spawner.environment = {
    "JUPYTER_CONFIG_PATH": _jupyter_config_path,
    "HUB_EXCHANGE": os.environ.get("HUB_EXCHANGE", "/srv/nbgrader/exchange"),
    "PATH": os.pathsep.join([str(VENV_BIN), "/usr/local/bin", "/usr/bin", "/bin"]),
}
