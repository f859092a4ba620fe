# Two entry points for newcomers (see README): `make demo` and `make test`.
# Both install what the project needs first: ffmpeg (Debian/Ubuntu, via apt-get when missing)
# and the Python package with its dependencies into .venv.

PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: install system-deps demo test bench

system-deps:
	@command -v ffmpeg >/dev/null 2>&1 && command -v ffprobe >/dev/null 2>&1 || { \
	  echo "Installing ffmpeg (needed for audio/video checks and transcoding)..."; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq ffmpeg >/dev/null; }

$(BIN)/hugginggpt: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	@touch $@

install: system-deps $(BIN)/hugginggpt

demo: install
	$(BIN)/hugginggpt run --sandbox "Describe this picture in as much detail as you can" --file tests/fixtures/media/chelsea.png

test: install
	$(BIN)/python -m pytest -q

bench: install
	$(BIN)/python -m benchmarks.bench_pipeline
