"""`python -m specops ...` runs the specops command line (see specops.cli)."""
import sys

from specops.cli import main

if __name__ == "__main__":
    sys.exit(main())
