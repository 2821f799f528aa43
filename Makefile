# chunkio: `make demo` and `make test` build their own virtual environment on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.chunkio-installed
# CI machines have 2 cores; pytest runs serially (multi-process tests spawn their own workers).
PYTEST_ARGS ?=

.PHONY: venv demo test lint typecheck unit bench bench-full bench-remote soak clean

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt setup.py chunkio/images/_jpegcrop.c
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# libjpeg-turbo's headers for the partial-decode extension (setup.py); without them the
	# build goes on and JPEG crops are decoded from whole images
	test -f /usr/include/jpeglib.h || ! command -v apt-get >/dev/null || [ "$$(id -u)" != 0 ] \
		|| apt-get install -y --no-install-recommends libjpeg62-turbo-dev \
		|| (apt-get update && apt-get install -y --no-install-recommends libjpeg62-turbo-dev) \
		|| echo "no libjpeg-turbo headers: chunkio decodes whole JPEGs"
	$(PY) -m pip install --quiet --upgrade pip
	# torch first and pinned, so nothing can pull the multi-GB CUDA build
	$(PY) -m pip install --quiet -c constraints.txt "torch==2.13.0"
	$(PY) -m pip install --quiet -c constraints.txt -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m benchmarks.demo

lint: $(STAMP)
	$(VENV)/bin/ruff check chunkio converters tests benchmarks
	$(VENV)/bin/ruff format --check chunkio converters tests benchmarks

typecheck: $(STAMP)
	$(VENV)/bin/mypy --strict chunkio

unit: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

test: lint typecheck unit

bench: $(STAMP)
	$(PY) -m benchmarks.run

# local vs S3 on loopback (moto + a latency proxy, 0 and 20 ms) vs zarr per sample; needs moto, s3fs
bench-remote: $(STAMP)
	$(PY) -m benchmarks.bench_remote

soak: $(STAMP)
	$(PY) -m pytest -m slow $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) demo-data bench-data .pytest_cache .mypy_cache .ruff_cache
