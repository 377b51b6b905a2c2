"""weightport as SGLang's weight-update path.

SGLang side: start it with ``--custom-weight-loader weightport.sglang.load`` (``sglang.Engine(...,
custom_weight_loader=[weightport.sglang.LOADER])``). Trainer side::

    from weightport.sglang import EngineClient, HTTPClient, SGLangTrainer
    sync = SGLangTrainer(HTTPClient("http://10.0.0.2:30000"), model, host="10.0.0.1")
    sync.send_weights()          # each version: moves while SGLang generates, then a short swap

Neither side imports SGLang until it runs in SGLang's processes (:mod:`.worker`, :mod:`.hooks`).
"""

from .worker import load

LOADER = "weightport.sglang.load"
__all__ = ["EngineClient", "HTTPClient", "LOADER", "SGLangTrainer", "load"]


def __getattr__(name):
    if name in ("EngineClient", "HTTPClient", "SGLangTrainer"):
        from . import trainer

        return getattr(trainer, name)
    raise AttributeError(f"module 'weightport.sglang' has no attribute '{name}'")
