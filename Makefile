# Two commands, each self-sufficient on a fresh machine: `make test` and `make demo`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.hndl-installed
#: The headless browser the docs-site test (tests/docs/test_site_in_browser.py) looks at pages with.
CHROMIUM := /usr/bin/chromium
PACKS := plugins/hndl-ops-basic plugins/hndl-ops-vision plugins/hndl-ops-transformer plugins/hndl-pretrained

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: install test demo docs site clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(PY) pyproject.toml constraints.txt $(addsuffix /pyproject.toml,$(PACKS))
	$(PY) -m pip install --quiet --upgrade pip "setuptools>=68" wheel
	$(PY) -m pip install --quiet --no-build-isolation -c constraints.txt \
		-e '.[dev,docs]' $(addprefix -e ,$(PACKS))
	touch $(STAMP)

install: $(STAMP)

# Installed once (a file target: skipped when present), quietly, from the distribution's archive.
$(CHROMIUM):
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

test: install $(CHROMIUM)
	$(PY) -m pytest -q
	$(PY) -m hndl.docs --check
	$(PY) -m sphinx -W --keep-going -E -q -b html docs docs/_build/html

demo: install
	$(PY) examples/demo.py

docs: install
	$(PY) -m hndl.docs

# The documentation site (docs/_build/html); its catalog covers every installed pack.
site: install
	$(PY) -m sphinx -W --keep-going -b html docs docs/_build/html

clean:
	rm -rf $(VENV)
