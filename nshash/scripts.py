"""The Lua scripts of the Redis stores, one ``.lua`` file per script in ``nshash/lua/``.

Each method keeps its scripts there (``keyed_read.lua``, ``simhash_assign.lua``, ...); a store
loads them by name, once per process.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

__all__ = ["lua_script"]


@cache
def lua_script(name: str) -> str:
    """The text of the script ``nshash/lua/NAME.lua``.

    Raises:
        FileNotFoundError: no script has that name (a packaging error, not a user's).
    """
    return (files(__package__) / "lua" / f"{name}.lua").read_text(encoding="utf-8")
