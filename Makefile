# Two entry points for newcomers (see README): `make demo` and `make test`.
# Both install what the project needs first: ffmpeg (Debian/Ubuntu, via apt-get when missing;
# `make test` also PostgreSQL and nginx, whose throwaway servers the tests start)
# and the Python package with its dependencies into .venv.

PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: install system-deps test-system-deps demo test bench

system-deps:
	@$(call apt,ffmpeg,command -v ffmpeg && command -v ffprobe)

test-system-deps:
	@$(call apt,postgresql nginx chromium,ls /usr/lib/postgresql/*/bin/postgres && { command -v nginx || [ -x /usr/sbin/nginx ]; } && command -v chromium)

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

install: system-deps $(BIN)/hugginggpt

demo: install
	$(BIN)/hugginggpt run --sandbox "Describe this picture in as much detail as you can" --file tests/fixtures/media/chelsea.png

test: install test-system-deps
	$(BIN)/python -m pytest -q

bench: install
	$(BIN)/python -m benchmarks.bench_pipeline
