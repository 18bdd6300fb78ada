"""``python -m gateway.cli``: the same as the ``shunter`` command."""

import sys

from gateway.cli import main

sys.exit(main())
