"""Stands in for sgl_kernel in .deps/sglang (scripts/setup --sglang), for SGLang's CPU path here.

SGLang imports sgl_kernel at start on a CPU; its CPU build is compiled from SGLang's sources and is
not on PyPI (PyPI's sglang-kernel is CUDA only: it fails to load without libcuda). Every name here
is a kernel that raises when called, so imports succeed, SGLang's AMX backend stays off (it needs
torch.ops.sgl_kernel, which this does not register) and layers run their native torch ops. A
kernel that SGLang does call raises naming itself."""

__version__ = "0.0.0+weightport.cpu"


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)

    def kernel(*args, **kwargs):
        raise NotImplementedError(f"sgl_kernel.{name}: SGLang's CPU kernels are not installed here "
                                  f"(scripts/setup --sglang); this path needs them")

    kernel.__name__ = name
    return kernel
