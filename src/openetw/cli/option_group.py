"""Several click options a command receives as one value: ``--start``/``--end`` as a
``TimeSpec``, the filter and property options as ``EnableOptions``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["option_group"]


def option_group(options: Sequence[Callable[[Any], Any]], names: Sequence[str], target: str, build: Callable[..., Any]) -> Callable[[Any], Any]:
    """A decorator adding ``options`` (click options whose parameters are ``names``) to a
    command, which receives ``build(*values)`` as its argument ``target`` instead."""

    def decorate(command: Any) -> Any:
        def wrapped(**kwargs: Any) -> Any:
            kwargs[target] = build(*(kwargs.pop(name) for name in names))
            return command(**kwargs)

        wrapped.__name__ = getattr(command, "__name__", "command")
        wrapped.__doc__ = command.__doc__
        if hasattr(command, "__click_params__"):  # options declared below this decorator
            wrapped.__click_params__ = list(command.__click_params__)  # type: ignore[attr-defined]
        for option in reversed(options):
            wrapped = option(wrapped)
        return wrapped

    return decorate
