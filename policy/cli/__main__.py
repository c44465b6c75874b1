"""``python -m policy.cli`` = ``hrl-policy``."""

import sys

from policy.cli import main

sys.exit(main())
