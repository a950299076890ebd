"""PyInstaller entry point: the bundle's one executable is the window, the CLI and the interpreter of Hisho's
own child processes.

- ``hisho [ARGS]``: ``hisho.cli.main`` (no arguments opens the window); ``hisho --engine-process`` is the engine
  (``EngineClient`` starts a frozen bundle that way).
- ``hisho -m hisho.MODULE [ARGS]``: runs that module as ``python -m`` would. A bundle has no Python, and
  ``sys.executable`` is this executable, so code that starts ``[sys.executable, "-m", "hisho.engine.measure.probe", ...]``
  (core/planner/calibrate.py) or ``-m hisho.engine`` works unchanged when frozen. Only Hisho's own modules are
  run this way: the bundle is not a general interpreter.
"""

import runpy
import sys


def main() -> int:
    argv = sys.argv[1:]
    if argv[:1] == ["-m"]:
        if len(argv) < 2 or not (argv[1] == "hisho" or argv[1].startswith("hisho.")):
            sys.stderr.write("hisho: error: -m runs only Hisho's own modules (hisho.engine, hisho.engine.measure.probe)\n")
            return 2
        sys.argv = [sys.executable, *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return 0  # a module that ends without sys.exit() succeeded, as under python -m
    from hisho.cli.main import main as cli_main

    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
