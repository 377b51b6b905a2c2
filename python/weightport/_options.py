"""The checks of every option the package takes, against the bounds the CLI uses (one table, in
the C++ library: weightport/core/option_bounds.h), so both refuse the same values with the same
words, and refuse them here with a weightport error instead of failing later as something else."""

from __future__ import annotations

import math
import numbers
from typing import Any

from . import _core
from .errors import InvalidArgument, WrongType


def number(name: str, value: Any) -> float:
    """`value` as a float, checked against option `name`'s bound (weightport.InvalidArgument when
    outside it, weightport.WrongType when it is no number)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise WrongType(f"{name} must be a number, not {type(value).__name__} {value!r:.60}")
    try:
        as_float = float(value)
    except OverflowError:
        raise InvalidArgument(f"{name} {value!r:.60} is too large") from None
    _core.check_option(name, as_float)  # raises weightport.InvalidArgument naming the bound
    return as_float


def whole(name: str, value: Any) -> int:
    """`value` as an int within option `name`'s bound (see :func:`number`)."""
    if isinstance(value, float) and math.isfinite(value) and not value.is_integer():
        raise InvalidArgument(f"{name} must be a whole number, not {value!r}")
    number(name, value)
    return int(value)


def rank_in(rank: Any, world_size: Any, names: tuple[str, str] = ("rank", "world_size")) -> tuple[int, int]:
    """(rank, world_size) checked: each within its bound, and the rank one of the world's (`names`:
    what the caller calls the two, e.g. a fleet's replica and replicas)."""
    rank, world_size = whole(names[0], rank), whole(names[1], world_size)
    if rank >= world_size:
        raise InvalidArgument(f"{names[0]} {rank} is outside 0..{world_size - 1}")
    return rank, world_size


def wait_seconds(value: Any) -> float:
    """A wait's timeout in seconds."""
    return number("wait timeout", value)


def version(value: Any, lowest: int = 1) -> int:
    """A version number: a whole number from `lowest` (1: one a source publishes; 0 where asking
    for "the version before any" means something) to 2^63 - 1."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise WrongType(f"a version must be a whole number, not {type(value).__name__} {value!r:.60}")
    if not lowest <= int(value) < 2**63:
        raise InvalidArgument(f"a version must be from {lowest} to 2^63 - 1, not {int(value)}")
    return int(value)


def address(text: Any, what: str) -> tuple[str, int]:
    """"host:port" (or ":port", "port") as (host, port); port 0 means any free one."""
    if not isinstance(text, str):
        raise WrongType(f"{what} must be a \"host:port\" string, not {type(text).__name__}")
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "", text
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not port.isdigit() or not port.isascii():
        raise InvalidArgument(f"{what} '{text:.100}': the port must be a number from 0 to 65535 (0: any free one)")
    try:
        return host, whole("port", int(port))
    except InvalidArgument as e:
        raise InvalidArgument(f"{what} '{text:.100}': {e}") from None


def coordinator(text: Any) -> str:
    """Checks a coordinator given as "host:port" or "etcd://host:port"; returns the store URL for
    the latter, "" for the former (whose port is checked here; the store's address is checked by
    the store client)."""
    if not isinstance(text, str):
        raise WrongType(f"coordinator must be a \"host:port\" or \"etcd://host:port\" string, not "
                        f"{type(text).__name__}")
    if text.startswith("etcd://"):
        return text
    address(text, "the coordinator's address")
    return ""
