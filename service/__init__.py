"""The nshash HTTP service: FastAPI on uvicorn, around one NSHash store.

Installed from a wheel, this package is ``nshash_service``; in a source checkout it is
``service``. Start it with ``nshash serve`` or ``uvicorn --factory nshash_service.app:create_app``.
"""

from __future__ import annotations

from .app import create_app
from .settings import Settings

__all__ = ["Settings", "create_app"]
