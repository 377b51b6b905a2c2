"""SGLang's side of the placement dry run and the build (:mod:`weightport.serving.placement`).

SGLang keeps no record of a parameter's layout before its processing after loading; on a CPU
without AMX (and on a GPU for unquantized models) that processing keeps every parameter's layout,
so the live parameters are the loading layout. Imports SGLang only when called."""

from __future__ import annotations

import functools

import torch

from ..serving.placement import LoaderHooks, ParamTemplate


def _no_recorded_layouts(layer: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {}


def bind_to_layer(t: torch.Tensor, template: ParamTemplate, layer: torch.nn.Module) -> torch.Tensor:
    """Gives `t` the template's attributes (SGLang's weight loaders take the parameter as an
    argument: bound to the live layer, they write the tensor they are given)."""
    t.__dict__ = template.like.__dict__.copy()
    return t


@functools.cache
def hooks() -> LoaderHooks:
    """SGLang's :class:`LoaderHooks` (imports SGLang)."""
    from sglang.srt.model_loader.weight_utils import default_weight_loader

    return LoaderHooks(loading_layouts=_no_recorded_layouts, bind=bind_to_layer,
                       default_loader=default_weight_loader, name="SGLang")


def post_process(layer: torch.nn.Module) -> None:
    """SGLang's processing after loading on one (shadow) layer: its quantization method's."""
    method = getattr(layer, "quant_method", None)
    process = getattr(method, "process_weights_after_loading", None)
    if process is not None:
        process(layer)
