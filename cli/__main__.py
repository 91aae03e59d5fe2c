"""``python3 -m pocketmq.cli`` is the ``pocketmq`` command."""

import sys

from . import main

sys.exit(main())
