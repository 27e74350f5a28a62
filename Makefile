# The README's two commands: `make course` (the main job) and `make test`. Each creates .venv and
# installs the pinned environment when it is missing, and is quick when it is already there.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
WORKERS ?= 2

.PHONY: course test chromium bubblewrap hub lab lab-instructor release new-exercise student-tree grade bench bench-gpu gpu-carry clean

# The pinned requirements install with uv (about half pip's time from an empty cache, with no cache left behind);
# where uv cannot install them, pip does.
$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check uv==0.13.9 && \
	  $(VENV)/bin/uv pip install --quiet --no-cache --python $(PY) -r requirements.txt || \
	  $(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	$(PY) -m ipykernel install --sys-prefix --name python3 > /dev/null
	touch $(STAMP)

## course: run the whole course headless (execute and grade every lesson, train, write reports) into build/course
course: $(STAMP) bubblewrap
	$(PY) -m harness course --out build/course

## test: the linter (ruff, rules in pyproject.toml), then the full test suite (what CI runs). One intra-op thread
## per process: xdist workers and notebook kernels share the cores, and more threads than cores spin-wait. The 30
## slowest tests are listed at the end (where the 30-minute budget goes).
test: $(STAMP) chromium bubblewrap hub
	$(VENV)/bin/ruff check .
	OMP_NUM_THREADS=1 $(PY) -m pytest -n $(WORKERS) --dist loadgroup --durations=30

## chromium: Debian's Chromium for the browser test (tests/test_browser.py drives JupyterLab in it). Installed
## with apt-get when missing, as root or with password-less sudo on Debian/Ubuntu; elsewhere the browser test is skipped (CI fails it).
chromium:
	@command -v chromium > /dev/null || command -v chromium-browser > /dev/null || \
	  { command -v apt-get > /dev/null && SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo -n) && \
	    $$SUDO apt-get update -qq && \
	    $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium > /dev/null; } || \
	  echo "chromium is not installed and could not be: the browser test will be skipped (install Debian's chromium)"

## bubblewrap: the sandbox every graded kernel runs in (harness/grading/sandbox.py). Installed with apt-get when
## missing, as root or with password-less sudo on Debian/Ubuntu; elsewhere `harness grade` says what to install.
bubblewrap:
	@command -v bwrap > /dev/null || \
	  { command -v apt-get > /dev/null && SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo -n) && \
	    $$SUDO apt-get update -qq && \
	    $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bubblewrap > /dev/null; } || \
	  echo "bubblewrap is not installed and could not be: install it (apt-get install bubblewrap) to grade"

## hub: configurable-http-proxy for the JupyterHub classroom (hub/jupyterhub_config.py), pinned in hub/package-lock.json:
## `npm ci` when missing or the lock changed. Installs Debian's nodejs and npm with apt-get when npm is missing, as root
## or with password-less sudo on Debian/Ubuntu; elsewhere the hub test is skipped (CI fails it).
hub: hub/node_modules/.package-lock.json

hub/node_modules/.package-lock.json: hub/package.json hub/package-lock.json
	@command -v npm > /dev/null || \
	  { command -v apt-get > /dev/null && SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo -n) && \
	    $$SUDO apt-get update -qq && \
	    $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm > /dev/null; } || \
	  echo "npm is not installed and could not be: the hub test will be skipped (install Debian's nodejs and npm)"
	@! command -v npm > /dev/null || (cd hub && npm ci --no-audit --no-fund --loglevel=error)

## lab: JupyterLab on the student notebooks
lab: $(STAMP)
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks

## lab-instructor: JupyterLab at the course root, where nbgrader's formgrader finds solutions/ and notebooks/
lab-instructor: $(STAMP)
	$(VENV)/bin/jupyter lab --notebook-dir=.

## release: regenerate notebooks/ from solutions/ with nbgrader
release: $(STAMP)
	$(PY) -m harness release

## new-exercise: a new graded exercise's skeleton (probe, judge, test stubs, notebook cells; CONTRIBUTING.md, "A check"):
## make new-exercise TASK=16-top-k TITLE='`top_k`' POINTS=2 [SECTION='5. Top-k answers']
new-exercise: $(STAMP)
	$(PY) -m harness new-exercise '$(TASK)' --title '$(TITLE)' --points '$(POINTS)' $(if $(SECTION),--section '$(SECTION)')

## student-tree: the student course (released notebooks, harness without the judge, README) into build/student, from
## the committed release (`make release` regenerates it), then the answerability audit of it (about 27 CPU-minutes).
student-tree: $(STAMP) bubblewrap
	rm -rf build/student
	$(PY) -m harness release --student build/student

## grade: autograde a folder or LMS zip of submissions into build/grades/ASSIGNMENT:
## make grade SUBMISSIONS=path ASSIGNMENT=00_welcome [ROSTER=roster.csv] [LMS_TITLE='title in the LMS'] [CANVAS_ID=id]
##   [COURSE=course.toml]
## (the Canvas file fills the assignment's own column: from a Canvas gradebook export as ROSTER, or CANVAS_ID;
## COURSE: due dates, extensions and the late policy, default ./course.toml when present, docs/course.example.toml)
grade: $(STAMP) bubblewrap
	$(PY) -m harness grade $(SUBMISSIONS) --assignment $(ASSIGNMENT) --workers $(WORKERS) $(if $(ROSTER),--roster $(ROSTER)) \
	  $(if $(LMS_TITLE),--lms-title '$(LMS_TITLE)') $(if $(CANVAS_ID),--canvas-assignment-id $(CANVAS_ID)) \
	  $(if $(COURSE),--course $(COURSE))

## bench: the CPU benchmarks in benchmarks/ (not part of the tests): each prints a table and writes a CSV and the
## machine record into build/bench; benchmarks/README.md keeps the results. Lightning, the engine benchmark's
## comparison, is installed beside .venv (build/bench-site), never into it.
bench: $(STAMP)
	$(PY) -m pip install --quiet --target build/bench-site --no-deps -r benchmarks/requirements.txt
	PYTHONPATH=build/bench-site $(PY) benchmarks/engine_overhead.py
	$(PY) benchmarks/dataloader_settings.py
	$(PY) benchmarks/grading_throughput.py
	$(PY) benchmarks/grading_overhead.py
	$(PY) benchmarks/drill_check_overhead.py
	$(PY) benchmarks/drill_recheck.py
	OMP_NUM_THREADS=1 $(PY) benchmarks/lesson_times.py

## bench-gpu: the GPU benchmarks, on a machine with a CUDA GPU. They run with that machine's own python3 and
## torch (no .venv, no downloads); `make bench-gpu PYTHON=.venv/bin/python` uses the project's environment.
bench-gpu:
	PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/gpu_precision.py
	PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/gpu_speedrun.py

## gpu-carry: what benchmarks/gpu_verify.py needs on the device tool's GPU machine beyond its image, into .whl/ (git-ignored):
## the wheels in benchmarks/gpu_wheels.txt (Python 3.12, x86-64) and Debian's bubblewrap for the grading step.
## benchmarks/README.md, "GPU verification", gives the one device command that installs them and runs the script.
gpu-carry:
	rm -rf .whl && mkdir -p .whl
	$(PYTHON) -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.12 \
	  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	  --platform manylinux1_x86_64 --platform any -d .whl -r benchmarks/gpu_wheels.txt
	cd .whl && apt-get download bubblewrap > /dev/null
	du -sh .whl

clean:
	rm -rf build runs
