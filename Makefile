# smartio: two entry points, `make demo` and `make test`; both set everything up first.
VENV   := .venv
PY     := $(VENV)/bin/python
SMARTIO := $(VENV)/bin/smartio

.PHONY: demo test lint deps venv module module-debug module-matrix clean

# StoreBench on this disk, then the five schedulers on the emulated S5 eMMC in the VM testbed (scripts/demo).
demo: deps venv module
	@scripts/demo

test: deps venv module module-debug lint
	$(VENV)/bin/pytest -ra

# ruff and mypy over src/, tests/ and the bench scripts (what and how: [tool.ruff] and [tool.mypy] in pyproject.toml).
lint: venv
	$(VENV)/bin/ruff check
	$(VENV)/bin/mypy

# fio for StoreBench; QEMU, nbdkit and a compiler for the testbed (the demo's second step and the tests).
deps:
	@scripts/install-deps --vm

venv: $(VENV)/.stamp

# The scheduler module, built against the cached Debian 6.1 headers (the VM tests load it).
module: venv
	$(MAKE) -C kernel PYTHON=$(abspath $(PY))

# The debug kernels (lockdep, KASAN: built from Debian's linux-source-6.1 and -6.12 once each, 4 to 8 minutes here,
# then cached) and the module built against each; the module's VM tests run under them too.
module-debug: venv
	$(MAKE) -C kernel debug PYTHON=$(abspath $(PY))
	$(MAKE) -C kernel debug DEBUG_KERNEL=6.12 PYTHON=$(abspath $(PY))

# The module for each of 6.1, 6.12 and the newest kernel on amd64 and arm64 (kernel/build/<kernel>-<arch>/), W=1
# and warnings as errors; 6.12 and the newest build in debootstrap chroots, so this needs root. Cold (two chroots,
# three kernels' packages) 7 to 10 minutes here, then about a minute. Not a prerequisite of test: pytest's
# tests/test_module_builds.py builds the same cells itself, and skips without root.
module-matrix: venv
	$(MAKE) -C kernel matrix PYTHON=$(abspath $(PY))

$(VENV)/.stamp: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@touch $@

clean:
	rm -rf $(VENV) build src/*.egg-info
