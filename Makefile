# The two commands of the course: `make book` and `make test`. Each sets itself up from a fresh clone.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
READY  := $(VENV)/.ready
# The CPU build of torch; a bare `torch` requirement would fetch a multi-GB CUDA build.
TORCH  ?= torch==2.13.0
JB     := $(VENV)/bin/jupyter-book build . -W -n --keep-going

.PHONY: setup book test unit nbval book-strict lab notebooks clean

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

test: unit nbval book-strict

unit: $(READY)
	$(PY) -m pytest tests -q

nbval: $(READY)
	$(PY) -m pytest --nbval notebooks -q -p no:cacheprovider

book-strict: $(READY)
	rm -rf _build
	$(JB)

lab: $(READY)
	$(PY) -m pip install --quiet jupyterlab
	$(VENV)/bin/jupyter lab notebooks

# Re-execute every chapter and store its outputs (run after editing a chapter).
notebooks: $(READY)
	$(PY) tools/execute_notebooks.py

clean:
	rm -rf _build $(VENV)
