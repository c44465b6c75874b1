"""``python -m policy.bench``: the policy benchmark (:mod:`policy.bench.stacks`)."""

import sys

from policy.bench.stacks import main

sys.exit(main())
