# chunkio: `make demo` and `make test` build their own virtual environment on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.chunkio-installed
# CI machines have 2 cores: two pytest processes (pytest-xdist) keep both busy while either waits
# on its tests' worker start-ups and I/O; PYTEST_WORKERS=0 runs the suite in one process.
PYTEST_WORKERS ?= 2
PYTEST_ARGS ?=

.PHONY: venv demo test lint typecheck unit docs docs-check bench bench-full bench-remote patch-peers-venv bench-patch-peers soak mutate fuzz fuzz-long fuzz-asan clean

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt setup.py chunkio/images/_jpegcrop.c \
		chunkio/images/_jpegcrop_dl.h chunkio/images/_yuv.c chunkio/backends/_fletcher.c \
		chunkio/read/_sparse_rows.c
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# libjpeg-turbo's headers for the partial-decode extension (setup.py), to link the system's
	# libjpeg; without them it builds against its vendored headers and binds Pillow's at import
	test -f /usr/include/jpeglib.h || ! command -v apt-get >/dev/null || [ "$$(id -u)" != 0 ] \
		|| apt-get install -y --no-install-recommends libjpeg62-turbo-dev \
		|| (apt-get update && apt-get install -y --no-install-recommends libjpeg62-turbo-dev) \
		|| echo "no libjpeg-turbo headers: _jpegcrop takes its vendored ones (Pillow's libjpeg)"
	$(PY) -m pip install --quiet --upgrade pip
	# torch first and pinned, so nothing can pull the multi-GB CUDA build
	$(PY) -m pip install --quiet -c constraints.txt "torch==2.13.0"
	$(PY) -m pip install --quiet -c constraints.txt -e ".[dev]"
	# pip hides an optional extension that failed to build (setup.py removes its old build
	# first): say so here, and stop under CI (see check-extensions)
	$(PY) -m chunkio.testing.compiled
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m benchmarks.demo

lint: $(STAMP)
	$(VENV)/bin/ruff check chunkio converters tests benchmarks docs/_griffe
	$(VENV)/bin/ruff format --check chunkio converters tests benchmarks docs/_griffe

typecheck: $(STAMP)
	$(VENV)/bin/mypy --strict chunkio

# every compiled part (setup.py) built from its current C source; fatal under CI or with
# CHUNKIO_REQUIRE_EXTENSIONS=1 (a failed build would otherwise leave its tests skipped and the
# run green), a warning elsewhere (pip installs without libjpeg headers go on, as designed)
.PHONY: check-extensions
check-extensions: $(STAMP)
	$(PY) -m chunkio.testing.compiled

unit: $(STAMP)
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

# the documentation site (mkdocs.yml, docs/): served with live reload on http://127.0.0.1:8000
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve

# a broken link, anchor or API reference (a name mkdocstrings cannot resolve) fails the build
docs-check: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

test: check-extensions lint typecheck docs-check unit

bench: $(STAMP)
	$(PY) -m benchmarks.run

# local vs S3 on loopback (moto + a latency proxy, 0 and 20 ms) vs zarr per sample; needs moto, s3fs
bench-remote: $(STAMP)
	$(PY) -m benchmarks.bench_remote

# the patch-loading peers (TorchIO, MONAI, zarrdataset) in their own venv, never chunkio's:
# benchmarks/requirements-patch-peers.txt into $(PATCH_PEERS_VENV) (Python 3.11, CPU torch)
PATCH_PEERS_VENV ?= /work/venv-patchpeers
PATCH_PEERS_PYTHON ?= python3.11
patch-peers-venv:
	test -x $(PATCH_PEERS_VENV)/bin/python || $(PATCH_PEERS_PYTHON) -m venv $(PATCH_PEERS_VENV)
	$(PATCH_PEERS_VENV)/bin/python -m pip install --quiet -r benchmarks/requirements-patch-peers.txt

# 3-D patches vs TorchIO, MONAI, zarrdataset and per-patch h5py/zarr (docs/benchmarks.md)
bench-patch-peers: $(STAMP) patch-peers-venv
	PATCH_PEERS_VENV=$(PATCH_PEERS_VENV) $(PY) -m benchmarks.bench_patch_peers

soak: $(STAMP)
	$(PY) -m pytest -m slow $(PYTEST_ARGS)

# mutation testing of the core modules (tests/mutation/modules.toml), outside the default suite:
# `make mutate` or `make mutate MODULES="chunkio/read/planning.py chunkio/read/dense.py"`; survivors
# are killed by a test or declared in tests/mutation/equivalent.txt with the reason
MODULES ?=
mutate: $(STAMP)
	$(PY) tests/mutation/run.py $(MODULES)

# the fuzz suite (tests/fuzz, docs/reference/bad-input.md): seeded mutations of small stores of
# every kind, each read in a fresh process with 0 and 2 workers, with and without the compiled
# decoders; resumable (build/fuzz/results.jsonl), a table at the end, a repro line per bad case.
# A short fixed-seed run is part of `make unit` (tests/fuzz/test_fuzz_short.py).
FUZZ_CASES ?= 1000
FUZZ_SEED ?= 0
FUZZ_KINDS ?=
fuzz: $(STAMP)
	$(PY) tests/fuzz/fuzz_run.py --cases $(FUZZ_CASES) --seed $(FUZZ_SEED) $(if $(FUZZ_KINDS),--kinds $(FUZZ_KINDS))

fuzz-long: $(STAMP)
	$(PY) tests/fuzz/fuzz_run.py --cases 20000 --seed 1 --results build/fuzz/results-long.jsonl

# the compiled decoders built with AddressSanitizer (build/asan), then the image kinds fuzzed
# through them: an out-of-bounds read or write stops the child (a crash) with ASan's report
ASAN_FLAGS := -fsanitize=address -fno-omit-frame-pointer -g -O1
fuzz-asan: $(STAMP)
	rm -rf build/asan
	CFLAGS="$(ASAN_FLAGS)" LDFLAGS="-fsanitize=address" $(PY) setup.py -q build_ext \
		--build-lib build/asan/lib --build-temp build/asan/tmp
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 LD_PRELOAD="$$(gcc -print-file-name=libasan.so)" \
		CHUNKIO_FUZZ_EXTENSIONS=build/asan/lib $(PY) tests/fuzz/fuzz_run.py --out build/fuzz-asan \
		--kinds jpeg,jpeg-crop,yuv420,yuv420-crop --cases $(FUZZ_CASES) --seed $(FUZZ_SEED)

clean:
	rm -rf $(VENV) demo-data bench-data site build/mutation mutants .pytest_cache .mypy_cache .ruff_cache
