"""Shadow layers: a version built beside the live model, then swapped in between engine steps.

Needs only torch (vLLM's processing is imported where it runs), so the swap is tested without vLLM
and on a GPU by ``scripts/gpu-check``.
"""

from __future__ import annotations

import copy

import torch


def copy_runs(runs, boxes, received, fresh) -> None:
    """Fills the fresh parameters from the received boxes: each run copies one box of a checkpoint
    tensor (as received: this worker's box of it, on the host) into one box of a parameter (on the
    worker's device: the host-to-device copy happens here, off the serving path)."""
    for r in runs:
        _, start, _ = boxes[r.tensor]
        src = received[r.tensor][tuple(slice(s - b, s - b + n) for s, b, n in zip(r.tstart, start, r.tlen))]
        dst = fresh[(r.layer, r.param)].data[tuple(slice(s, s + n) for s, n in zip(r.pstart, r.plen))]
        dst.copy_(src.reshape(dst.shape), non_blocking=dst.device.type != "cpu")


def shadow_of(layer: torch.nn.Module) -> torch.nn.Module:
    """A copy of `layer` sharing everything but its tensor tables and its quantization method, which
    is processed as on a first load: vLLM's fused-MoE method, once it has a kernel, treats a reload
    as an in-place update and skips the experts' own processing (the CPU kernels' weight prepacking),
    which leaves reloaded CPU MoE weights unpacked. The shadow's method starts without one."""
    shadow = copy.copy(layer)
    shadow._parameters = dict(layer._parameters)
    shadow._buffers = dict(layer._buffers)
    method = getattr(layer, "quant_method", None)
    if method is not None:
        method = copy.copy(method)
        if getattr(method, "moe_kernel", None) is not None:
            method.moe_kernel = None
        shadow.quant_method = method
    return shadow


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


def swap_in(live: torch.nn.Module, shadow: torch.nn.Module, copied: set[int]) -> None:
    """Makes `live` compute with `shadow`'s state. A tensor whose layout did not change is copied
    into the live one (its address stays: CUDA graphs and kernels that cached it hold it, as vLLM's
    own reload keeps it); any other is replaced, and so are the attributes post-processing set
    (packed GEMM handles). `copied`: tensors already copied (tied parameters are copied once)."""
    for table in ("_parameters", "_buffers"):
        live_table, shadow_table = getattr(live, table), getattr(shadow, table)
        for name, t in shadow_table.items():
            cur = live_table.get(name)
            if t is None or cur is t:
                continue
            if (cur is not None and cur.numel() > 0 and cur.shape == t.shape and cur.dtype == t.dtype
                    and cur.device == t.device):
                if id(t) not in copied:
                    cur.data.copy_(t)
                    copied.add(id(t))
            else:
                live_table[name] = t
    state = live.__dict__
    for key, value in shadow.__dict__.items():
        if key not in ("_parameters", "_buffers") and state.get(key) is not value:
            state[key] = value
