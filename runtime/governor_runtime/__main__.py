"""``python -m governor_runtime serve --initial-cap N [vLLM server args...]``."""

import sys

from governor_runtime.launcher import main

sys.exit(main())
