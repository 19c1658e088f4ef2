from __future__ import annotations

import sys

from agents.agent import main

if __name__ == "__main__":
    sys.exit(main())
