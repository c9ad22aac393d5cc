"""Build the optional C extensions; the metadata lives in pyproject.toml.

``nshash.text._kernel`` is the text kernel (``Fingerprinter.prepare`` in one pass) and
``nshash.methods.nshash._assign`` the compiled half of the nshash assignment. Where no C
compiler exists (or a build fails) the install still succeeds without them, and nshash runs
its pure-Python paths with the same results (``nshash --version`` says which run).
"""

from __future__ import annotations

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that warns instead of failing: the extensions accelerate, nothing needs them."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler at all (PlatformError and friends)
            self._skip(exc)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # the compiler failed on this extension
            self._skip(exc)

    def _skip(self, exc: Exception) -> None:
        if os.environ.get("NSHASH_REQUIRE_KERNEL"):
            raise exc
        print(
            f"warning: an nshash C extension was not built ({exc}); its pure-Python path will run",
            file=sys.stderr,
        )


#: The header both extensions include (listed so that a change rebuilds them, and so that
#: the source distribution carries it).
SHARED = ["nshash/text/_u64sort.h"]
FLAGS = [] if sys.platform == "win32" else ["-O2", "-std=c99"]

setup(
    ext_modules=[
        Extension(
            "nshash.text._kernel",
            sources=["nshash/text/_kernel.c"],
            depends=SHARED,
            extra_compile_args=FLAGS,
            optional=True,
        ),
        Extension(
            "nshash.methods.nshash._assign",
            sources=["nshash/methods/nshash/_assign.c"],
            depends=SHARED,
            extra_compile_args=FLAGS,
            optional=True,
        ),
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)
