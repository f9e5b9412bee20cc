# The companion book: `make book` (full mode), `make book MODE=quick`, `make test`, `make lab`, `make pdf`;
# the results store: `make results` (compute the full study into store/), `make verify` (prove it, as CI does).
# See book/reproduce.md.

MODE   ?= full
# Notebooks executed at a time: 2 fills both cores of a 2-core machine (book/reproduce.md).
BOOK_JOBS ?= 2
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# Byte code in .venv/pycache, even where $PYTHONDONTWRITEBYTECODE is set (some containers set it, and the
# install is --no-compile): without any, every process (each notebook's kernel and workers, each test's
# subprocess) compiles torch's, pandas's and matplotlib's modules from source again, about 4 CPU-s each.
export PYTHONPYCACHEPREFIX ?= $(CURDIR)/$(VENV)/pycache
unexport PYTHONDONTWRITEBYTECODE
# python3.11 if there is one, else python3 (checked to be 3.11 below).
PYTHON ?= $(shell command -v python3.11 || command -v python3)

# --all: an incremental Sphinx build does not repeat the warnings of unchanged pages, so after a
# failed -W build a second run would pass without any fix.
JB_BUILD = $(BIN)/jupyter-book build . -W --keep-going --all

.PHONY: book html lab pdf test lint install chromium clean results verify

book: $(STAMP)  ## execute the notebooks (MODE=quick|full), then render the site with -W
	$(BIN)/python -m resgd.publish.build --mode $(MODE) --jobs $(BOOK_JOBS)
	$(JB_BUILD)

results: $(STAMP)  ## compute what the results store lacks, re-check what it holds, say what changed; commit store/ after
	$(BIN)/python -m resgd results --jobs $(BOOK_JOBS)

verify: $(STAMP)  ## prove the results store bit for bit (checksums, keys, first iterations, a seeded sample)
	$(BIN)/python -m resgd verify --jobs $(BOOK_JOBS)

html: $(STAMP)  ## render only, from the notebooks executed last time
	$(JB_BUILD)

pdf: $(STAMP) chromium  ## the whole book as one PDF (after `make book`): _build/pdf/, copied into the site
	$(JB_BUILD) --builder singlehtml
	$(BIN)/python -m resgd.publish.pdf

lab: $(STAMP)  ## JupyterLab on the project: notebooks/*.md open as notebooks (LAB_ARGS=... for jupyter lab)
	$(BIN)/python -m resgd.publish.lab $(LAB_ARGS)

lint: $(STAMP)  ## ruff (pinned; rules in pyproject.toml) over src/, tests/ and benchmarks/
	$(BIN)/ruff check src tests benchmarks

test: $(STAMP) chromium  ## the test suite (site and browser checks need `make book` first)
	$(BIN)/python -m pytest

install: $(STAMP)

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || \
	  { echo "make: need Python 3.11 (found $(PYTHON)); set PYTHON=/path/to/python3.11" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)

# Reinstall only when the dependency files change. --no-compile: pip would byte-compile every module of
# every package (half of the install's CPU time); Python compiles the few hundred that are imported, once.
$(STAMP): pyproject.toml requirements.lock | $(BIN)/python
	$(BIN)/python -m pip install --no-compile -c requirements.lock -e '.[book,test,cluster]'
	touch $@

chromium:  ## Debian's chromium + chromium-driver for the browser tests, when missing
	@if command -v chromium >/dev/null && [ -x /usr/bin/chromedriver ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing chromium chromium-driver"; \
	  apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null || \
	  { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null; }; \
	else echo "make: browser tests will skip; install Chromium with:" \
	  "sudo apt-get install chromium chromium-driver"; fi

clean:
	rm -rf _build figures notebooks/*.ipynb  # keeps results/cache (the run cache); results/tables etc. are links into figures/.resgd-builds, gone with it
