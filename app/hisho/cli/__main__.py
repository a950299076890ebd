"""``python -m hisho.cli``: the same as the ``hisho`` command."""
from hisho.cli.main import main

raise SystemExit(main())
