"""python -m strategy: see strategy/cli.py (or python -m strategy --help)."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
