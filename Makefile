# smartio: two entry points, `make demo` and `make test`; both set everything up first.
VENV   := .venv
PY     := $(VENV)/bin/python
SMARTIO := $(VENV)/bin/smartio

.PHONY: demo test deps deps-bench venv module clean

demo: deps-bench venv
	@scratch=$$(mktemp -d "$(CURDIR)/.demo.XXXXXX") && \
	trap 'rm -rf "$$scratch"' EXIT INT TERM && \
	$(SMARTIO) bench all --quick --target "$$scratch"

test: deps venv module
	$(VENV)/bin/pytest -ra

# The demo needs only fio; the tests also need QEMU, nbdkit and a compiler for the testbed.
deps-bench:
	@scripts/install-deps

deps:
	@scripts/install-deps --vm

venv: $(VENV)/.stamp

# The scheduler module, built against the cached Debian 6.1 headers (the VM tests load it).
module: venv
	$(MAKE) -C kernel PYTHON=$(abspath $(PY))

$(VENV)/.stamp: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@touch $@

clean:
	rm -rf $(VENV) build src/*.egg-info
