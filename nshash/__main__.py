"""``python -m nshash``: the same command line as the ``nshash`` script."""

from __future__ import annotations

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
