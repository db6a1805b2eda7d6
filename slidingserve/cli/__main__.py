"""`python -m slidingserve.cli`: the `slidingserve` command."""

from __future__ import annotations

import sys

from slidingserve.cli import main

sys.exit(main())
