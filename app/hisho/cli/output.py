"""What every command writes, in one place: figures as JSON on stdout, an error as one line on stderr, and the
exit codes (the command line contract, docs/architecture.md). The command modules use these; none imports the
parser module (``hisho.cli.main``), which imports them."""

from __future__ import annotations

import json
import sys
from typing import Any

EXIT_OK, EXIT_INTERNAL, EXIT_BAD_INPUT = 0, 1, 2


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()


def fail(message: str, code: int = EXIT_BAD_INPUT) -> int:
    sys.stderr.write(f"hisho: error: {message}\n")
    return code
