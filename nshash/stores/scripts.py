"""The Lua scripts of the Redis stores, one ``.lua`` file per script in ``nshash/lua/``.

Each method keeps its scripts there (``nshash_assign.lua``, ``keyed_read.lua``,
``simhash_assign.lua``, ...); a store loads them by name, once per process. A line
``-- include: NAME`` stands for the text of ``NAME.lua`` (code two scripts share, such as
``nshash_common.lua``); a script's first line may be a ``#!lua`` shebang with its flags.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

__all__ = ["lua_script"]


_INCLUDE = "-- include: "


@cache
def lua_script(name: str) -> str:
    """The text of the script ``nshash/lua/NAME.lua``, its includes expanded.

    Raises:
        FileNotFoundError: no script has that name (a packaging error, not a user's).
    """
    text = (files(__package__) / "lua" / f"{name}.lua").read_text(encoding="utf-8")
    lines = []
    for line in text.splitlines(keepends=True):
        if line.startswith(_INCLUDE):
            lines.append(lua_script(line[len(_INCLUDE) :].strip()))
        else:
            lines.append(line)
    return "".join(lines)
