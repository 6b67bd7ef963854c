"""``python -m fabricscope``."""

from fabricscope.cli import console_main

raise SystemExit(console_main())
