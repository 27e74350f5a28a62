"""nbgrader's settings for every user's JupyterLab on the hub (hub/jupyterhub_config.py puts this folder on
JUPYTER_CONFIG_PATH): the exchange the Assignment List fetches from and submits to, and the course id."""

import os

c = get_config()  # noqa: F821 (provided by nbgrader)

c.Exchange.root = os.environ.get("HUB_EXCHANGE", "/srv/nbgrader/exchange")
c.CourseDirectory.course_id = "pytorch-training-lab"  # as in the repository's nbgrader_config.py
