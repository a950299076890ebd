import sys

from hisho.engine.server import main

sys.exit(main())
