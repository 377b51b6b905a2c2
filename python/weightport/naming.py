"""Rename rules: map the names one side gives its tensors to the names the plan matches on.

A trainer wrapped for data parallelism names its parameters differently from the bare model an
inference replica holds: DDP adds a leading ``module.``, FSDP (v1) a ``_fsdp_wrapped_module.``
segment at every wrapped submodule, activation checkpointing ``_checkpoint_wrapped_module.`` and
``torch.compile`` ``_orig_mod.``. Give either side a rule (``rename=``) and the plan matches the
mapped names::

    pub = weightport.Publisher(..., rename=weightport.naming.UNWRAP)  # module.fc.weight -> fc.weight
    sub = weightport.Subscriber(..., rename={"model.": "", "*.attn": "self_attn"})

A rule is a :class:`Rename` made from a callable (name -> name) or a dict of replacements, applied
in the dict's order, each to the result of the one before. Names are dot-separated segments and a
replacement moves whole segments, never part of one:

- ``{"model.decoder": "decoder"}`` -- a prefix: ``model.decoder.fc.w`` becomes ``decoder.fc.w``;
  ``model.decoders.w`` and ``x.model.decoder.w`` are left alone.
- ``{"*._orig_mod": ""}`` -- a leading ``*.`` matches the segments anywhere (at the start too):
  ``_orig_mod.a._orig_mod.b`` becomes ``a.b``.

A trailing ``.`` on either side is optional (``"module."`` is ``"module"``); an empty replacement
removes the segments. ``weightport plan --rename FROM=TO`` takes the same replacements.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping

Rule = Mapping[str, str] | Callable[[str], str]


def _segments(path: str) -> list[str]:
    """The segments of a replacement's side: "" is none, a trailing "." is dropped."""
    path = path[:-1] if path.endswith(".") else path
    return path.split(".") if path else []


class _Replacement:
    """One dict entry: the segments `old` (a prefix, or anywhere) become the segments `new`."""

    __slots__ = ("old", "new", "anywhere")

    def __init__(self, old: str, new: str):
        if not isinstance(old, str) or not isinstance(new, str):
            raise TypeError(f"rename: expected str -> str, got {type(old).__name__} -> {type(new).__name__}")
        self.anywhere = old.startswith("*.")
        self.old = _segments(old[2:] if self.anywhere else old)
        self.new = _segments(new)
        if not self.old or any(not s or "*" in s for s in self.old):
            raise ValueError(f"rename: '{old}' is not a name prefix ('a.b', or '*.a.b' to match anywhere)")

    def __call__(self, name: str) -> str:
        parts, k = name.split("."), len(self.old)
        if not self.anywhere:
            return ".".join(self.new + parts[k:]) if parts[:k] == self.old else name
        out, i = [], 0
        while i < len(parts):
            if parts[i:i + k] == self.old:
                out += self.new
                i += k
            else:
                out.append(parts[i])
                i += 1
        return ".".join(out)


class Rename:
    """A name-mapping rule: from a dict of segment replacements (see the module's docstring) or a
    callable that takes a tensor's name and returns the name to plan with."""

    def __init__(self, rule: Rule):
        if isinstance(rule, Rename):
            self._map: Callable[[str], str] = rule._map
            self._text = rule._text
        elif isinstance(rule, Mapping):
            replacements = [_Replacement(old, new) for old, new in rule.items()]

            def apply(name: str) -> str:
                for r in replacements:
                    name = r(name)
                return name

            self._map = apply
            self._text = repr(dict(rule))
        elif callable(rule):
            self._map = rule
            self._text = getattr(rule, "__name__", repr(rule))
        else:
            raise TypeError(f"rename: expected a dict or a callable, got {type(rule).__name__}")

    def __call__(self, name: str) -> str:
        """The mapped name of `name`; raises ValueError when it is empty, TypeError when the callable
        returns something other than a str (both name `name`)."""
        mapped = self._map(name)
        if not isinstance(mapped, str):
            raise TypeError(f"tensor '{name}': the rename rule returned {type(mapped).__name__}, not a str")
        if not mapped:
            raise ValueError(f"tensor '{name}': the rename rule maps it to an empty name")
        return mapped

    def map_names(self, names: Iterable[str]) -> dict[str, str]:
        """original -> mapped for every name, in order; raises ValueError naming both originals when
        two names map to the same one."""
        out: dict[str, str] = {}
        origin: dict[str, str] = {}
        for name in names:
            mapped = self(name)
            if mapped in origin:
                raise ValueError(f"tensors '{origin[mapped]}' and '{name}' both map to '{mapped}' "
                                 f"(rename rule {self._text})")
            origin[mapped] = name
            out[name] = mapped
        return out

    def __repr__(self) -> str:
        return f"Rename({self._text})"


def as_rename(rule: Rename | Rule | None) -> Rename | None:
    """`rule` as a :class:`Rename` (a dict or callable is wrapped); None stays None."""
    return None if rule is None else Rename(rule)


# Strips what data-parallel and compiler wrappers add to parameter names: every `_orig_mod`
# (torch.compile), `_fsdp_wrapped_module` (FSDP v1) and `_checkpoint_wrapped_module` (activation
# checkpointing) segment, then a leading `module` (DDP, DataParallel).
UNWRAP = Rename({
    "*._orig_mod": "",
    "*._fsdp_wrapped_module": "",
    "*._checkpoint_wrapped_module": "",
    "module": "",
})


def strip_wrappers(name: str) -> str:
    """`name` without its wrappers' segments (see :data:`UNWRAP`):
    ``module._orig_mod.layers.0._fsdp_wrapped_module.w`` -> ``layers.0.w``."""
    return UNWRAP(name)


__all__ = ["Rename", "UNWRAP", "as_rename", "strip_wrappers"]
