"""Build the optional C text kernel (nshash.text._kernel); the metadata lives in pyproject.toml.

Where no C compiler exists (or the build fails) the install still succeeds without it, and
nshash runs its pure-Python text path with the same results (``nshash --version`` says which).
"""

from __future__ import annotations

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that warns instead of failing: the kernel is an accelerator, not a need."""

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
            f"warning: nshash's C kernel was not built ({exc}); the pure-Python path will run",
            file=sys.stderr,
        )


setup(
    ext_modules=[
        Extension(
            "nshash.text._kernel",
            sources=["nshash/text/_kernel.c"],
            extra_compile_args=[] if sys.platform == "win32" else ["-O2", "-std=c99"],
            optional=True,
        )
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)
