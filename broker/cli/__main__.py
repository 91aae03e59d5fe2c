"""``python3 -m broker.cli`` is the ``pocketmq`` command."""

import sys

from . import main

sys.exit(main())
