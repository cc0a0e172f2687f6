"""``python -m hndl.cli``: the same as the ``hndl`` console script."""

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
