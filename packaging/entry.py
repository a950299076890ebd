"""PyInstaller entry point: the bundle's executable runs the CLI (``hisho`` with no arguments opens the window)."""

import sys

from hisho.cli import main

sys.exit(main())
