"""``python -m frtrace``."""

from frtrace.cli import main

main()
