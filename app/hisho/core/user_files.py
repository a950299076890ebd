"""A JSON file the person chose (a conversation export to import, an ``mcp.json`` from another app): read whole,
any failure one ``UserError`` line that names the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hisho.core.errors import UserError


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read {path}: {exc}") from None
    except ValueError as exc:
        raise UserError(f"{path.name} is not valid JSON ({exc})") from None
