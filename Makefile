# Two entry points for newcomers (see README): `make demo` and `make test`.
# Both install what the project needs first: ffmpeg (Debian/Ubuntu, via apt-get when missing;
# `make test` also PostgreSQL, nginx and Prometheus, whose throwaway servers the tests start)
# and the Python package with its dependencies into .venv.

PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: install install-experts system-deps test-system-deps demo test bench bench-experts

system-deps:
	@$(call apt,ffmpeg,command -v ffmpeg && command -v ffprobe)
	@$(call apt,python3-venv,$(PYTHON) -c 'import ensurepip')

test-system-deps:
	@$(call apt,postgresql nginx chromium prometheus,ls /usr/lib/postgresql/*/bin/postgres && { command -v nginx || [ -x /usr/sbin/nginx ]; } && command -v chromium && command -v prometheus)

# $(call apt,PACKAGES,CHECK): apt-get install PACKAGES unless the shell CHECK succeeds
define apt
	{ $(2); } >/dev/null 2>&1 || { \
	  echo "Installing $(1) (Debian packages)..."; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $(1) >/dev/null; }
endef

$(BIN)/hugginggpt: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	@touch $@

# The tests also run the expert server (torch, transformers, diffusers, the annotators: about a
# minute and 5.5 GB) and Ray Serve. torch and torchvision are installed as a matching pair.
# TORCH_INDEX: a pip index to take torch and torchvision from first, e.g. PyTorch's CPU-only
# wheels (https://download.pytorch.org/whl/cpu: about 1 GB instead of PyPI's CUDA build); .ci/run
# sets it when that index is reachable.
TORCH_PAIR = 'torch==2.14.1' 'torchvision==0.29.1'
$(VENV)/.experts-installed: pyproject.toml $(BIN)/hugginggpt
	$(if $(TORCH_INDEX),$(BIN)/pip install -q --index-url $(TORCH_INDEX) $(TORCH_PAIR))
	$(BIN)/pip install -q $(TORCH_PAIR) -e '.[test,experts,ray]'
	@touch $@

install: system-deps $(BIN)/hugginggpt

install-experts: install $(VENV)/.experts-installed

demo: install
	$(BIN)/hugginggpt run --sandbox "Describe this picture in as much detail as you can" --file tests/fixtures/media/chelsea.png

test: install-experts test-system-deps
	$(BIN)/python -m pytest -q

bench: install
	$(BIN)/python -m benchmarks.bench_pipeline

bench-experts: install-experts
	$(BIN)/python -m benchmarks.bench_experts
