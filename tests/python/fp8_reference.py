"""An independent float8 e4m3fn quantisation in 128x128 blocks with PyTorch: per block, scale =
amax / 448 (1 for an all-zero block), values = (x / scale) cast to torch.float8_e4m3fn."""
import torch

BLOCK = 128


def expand(scales, shape):
    """Block scales spread over the elements of a matrix (or vector) of `shape`."""
    if len(shape) == 1:
        return scales.repeat_interleave(BLOCK)[:shape[0]]
    return scales.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:shape[0], :shape[1]]


def quantise(x):
    """x (a matrix or vector starting on a block boundary) -> (e4m3 values as uint8, f32 block scales
    in the scale grid's shape)."""
    m = x.float().reshape(1, -1) if x.ndim == 1 else x.float()
    rows, cols = m.shape
    br, bc = -(-rows // BLOCK), -(-cols // BLOCK)
    padded = torch.zeros(br * BLOCK, bc * BLOCK)
    padded[:rows, :cols] = m
    amax = padded.abs().reshape(br, BLOCK, bc, BLOCK).amax(dim=(1, 3))
    scales = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
    if x.ndim == 1:
        scales = scales.reshape(-1)
    q = (x.float() / expand(scales, list(x.shape))).to(torch.float8_e4m3fn)
    return q.view(torch.uint8), scales


def quantise_per_tensor(x):
    """x -> (e4m3 values as uint8, its one f32 scale in a scale grid of ones: [1, 1] or [1])."""
    amax = x.float().abs().amax()
    scale = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
    q = (x.float() / scale).to(torch.float8_e4m3fn)
    return q.view(torch.uint8), scale.reshape([1] * x.ndim)
