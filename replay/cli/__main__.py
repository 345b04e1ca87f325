"""``python -m replay.cli``."""

from replay.cli import main

raise SystemExit(main())
