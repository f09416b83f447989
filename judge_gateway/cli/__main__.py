"""`python -m judge_gateway.cli ...`: the same command as the `judge-gateway` console script."""

import sys

from .main import main

sys.exit(main())
