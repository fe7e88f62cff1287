"""Builds the compiled core (``openetw._native``), optionally: the metadata is in pyproject.toml.

Every ``src/openetw/_native/_<name>.c`` is one extension module, ``openetw._native._<name>``,
built from that file alone (headers beside it may be included). A compiler that is missing or
fails is not an error: the install goes on with the pure-Python path and says so once. Set
``OPENETW_REQUIRE_NATIVE=1`` to make a failed compile fail the install instead (wheel builds).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

NATIVE = Path("src", "openetw", "_native")
_COMPILE_FLAGS = ["-O2", "-std=c11", "-fno-strict-aliasing", "-Wall", "-Wno-missing-field-initializers"]


class OptionalBuildExt(build_ext):
    """build_ext that falls back to the pure path (one notice) when the C cannot be built."""

    failed: list[str]

    def run(self) -> None:
        self.failed = []
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - no compiler at all (distutils' errors differ by version)
            self._fallback("the extensions", exc)
        self._notice()

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001 - a compile or link error of any kind: the pure path serves
            self._fallback(ext.name, exc)

    def _fallback(self, name: str, exc: BaseException) -> None:
        if os.environ.get("OPENETW_REQUIRE_NATIVE") == "1":
            raise exc
        self.failed.append(f"{name} ({str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__})")

    def _notice(self) -> None:
        if self.failed:
            print(
                "openetw: the compiled core was not built, so openetw runs on its pure-Python path "
                f"(same results, slower): {'; '.join(self.failed)}",
                file=sys.stderr,
            )


def _extensions() -> list[Extension]:
    return [
        Extension(
            f"openetw._native.{source.stem}",
            sources=[source.as_posix()],
            depends=[header.as_posix() for header in sorted(NATIVE.glob("*.h"))],
            extra_compile_args=_COMPILE_FLAGS,
        )
        for source in sorted(NATIVE.glob("_*.c"))
    ]


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
