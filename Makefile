# The two commands of the course: `make book` and `make test`. Each sets itself up from a fresh clone.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
READY  := $(VENV)/.ready
# The CPU build of torch; a bare `torch` requirement would fetch a multi-GB CUDA build.
TORCH  ?= torch==2.13.0
JB     := $(VENV)/bin/jupyter-book build . -W -n --keep-going
# Debian's Chromium checks the built book in a real browser; `make test` installs it when missing.
CHROMIUM ?= /usr/bin/chromium
SUDO   := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: setup book test unit nbval book-strict browser lab notebooks clean

setup: $(READY)

$(READY): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH)"
	$(PY) -m pip install --quiet -e ".[book,test]"
	touch $@

book: $(READY)
	$(PY) tools/execute_notebooks.py --unexecuted
	$(JB)
	@echo "The book is at _build/html/index.html"

test: unit nbval book-strict browser

unit: $(READY)
	$(PY) -m pytest tests -q --ignore=tests/test_browser.py

nbval: $(READY)
	$(PY) -m pytest --nbval notebooks -q -p no:cacheprovider

book-strict: $(READY)
	rm -rf _build
	$(JB)

# Every page of the strictly built book in headless Chromium; screenshots land in _build/screenshots/.
browser: book-strict $(CHROMIUM)
	REQUIRE_BOOK=1 CHROMIUM=$(CHROMIUM) $(PY) -m pytest tests/test_browser.py -q -p no:cacheprovider

$(CHROMIUM):
	$(SUDO) apt-get update
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
		chromium fonts-liberation fonts-dejavu-core

lab: $(READY)
	$(PY) -m pip install --quiet jupyterlab
	$(VENV)/bin/jupyter lab notebooks

# Re-execute every chapter and store its outputs (run after editing a chapter).
notebooks: $(READY)
	$(PY) tools/execute_notebooks.py

clean:
	rm -rf _build $(VENV)
