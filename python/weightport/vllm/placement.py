"""vLLM's side of the placement dry run and the build (:mod:`weightport.serving.placement`): where
vLLM records a parameter's loading layout, how a fresh tensor's loaders are bound to a layer, and
vLLM's processing after loading. Imports vLLM only when called."""

from __future__ import annotations

import functools

import torch

from ..serving.placement import LoaderHooks, ModelPlacement, ParamTemplate, TensorMeta
from ..serving.placement import learn_placement as _learn


def _loading_layouts(layer: torch.nn.Module) -> dict[str, torch.Tensor]:
    """vLLM's recorded pre-processing metadata of `layer` (post-processing may have replaced the
    live tensors, and the build fills the loading layout)."""
    from vllm.model_executor.model_loader.reload.layerwise import get_layerwise_info

    return get_layerwise_info(layer).restore_metadata[0]


def bind_to_layer(t: torch.Tensor, template: ParamTemplate, layer: torch.nn.Module) -> torch.Tensor:
    """Gives `t` the template's attributes with its weight loaders bound to `layer`."""
    from vllm.model_executor.model_loader.reload.sanitize import restore_layer_refs

    t.__dict__ = template.like.__dict__.copy()
    return restore_layer_refs(t, layer)


@functools.cache
def hooks() -> LoaderHooks:
    """vLLM's :class:`LoaderHooks` (imports vLLM)."""
    from vllm.model_executor.model_loader.weight_utils import default_weight_loader

    return LoaderHooks(loading_layouts=_loading_layouts, bind=bind_to_layer, default_loader=default_weight_loader,
                       name="vLLM")


def learn_placement(model: torch.nn.Module, metas: list[TensorMeta]) -> ModelPlacement:
    """:func:`weightport.serving.placement.learn_placement` on a vLLM model."""
    return _learn(model, metas, hooks())


def post_process(layer: torch.nn.Module) -> None:
    """vLLM's own processing after loading (repacking, quantization) on one (shadow) layer."""
    from vllm.model_executor.layers.quantization.base_config import QuantizeMethodBase

    method = getattr(layer, "quant_method", None)
    if isinstance(method, QuantizeMethodBase):
        if hasattr(layer, "_already_called_process_weights_after_loading"):
            delattr(layer, "_already_called_process_weights_after_loading")
        method.process_weights_after_loading(layer)
        if hasattr(layer, "update_param_tp_status"):
            layer.update_param_tp_status()
