"""weightport as a vLLM weight-transfer backend.

vLLM side: ``LLM(..., weight_transfer_config={"backend": "weightport"})`` (the package registers the
backend through vLLM's plugin entry point). Trainer side::

    from weightport.vllm import WeightportTrainerInitInfo, LLMWeightSyncClient
    from vllm.distributed.weight_transfer import WeightTransferTrainerFactory
    engine = WeightTransferTrainerFactory.trainer_init(
        WeightportTrainerInitInfo(rank=r, world_size=n), client=client, source=model)
    engine.send_weights()          # each version: moves while vLLM generates, then a short swap

The names below import vLLM when first used (and register the backend in this process: vLLM runs
its plugins only in the processes it starts); :mod:`.placement` alone needs only torch.
"""

__all__ = ["FleetClient", "LLMWeightSyncClient", "WeightportTrainerEngine", "WeightportTrainerInitInfo",
           "rollback_fleet"]


def __getattr__(name):
    if name in __all__:
        from . import trainer

        return getattr(trainer, name)
    raise AttributeError(f"module 'weightport.vllm' has no attribute '{name}'")
