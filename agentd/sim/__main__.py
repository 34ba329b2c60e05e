"""``python -m agentd.sim``: run the simulator until SIGTERM."""

import sys

from agentd.sim import main

sys.exit(main())
