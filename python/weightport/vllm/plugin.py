"""vLLM's plugin entry point (``vllm.general_plugins``): registers the ``weightport`` backend with
vLLM's worker-side and trainer-side weight-transfer factories. vLLM calls it in every process it
starts, so installing the weightport package is all a user does before
``weight_transfer_config={"backend": "weightport"}``."""


def register() -> None:
    from vllm.distributed.weight_transfer.factory import (WeightTransferEngineFactory,
                                                          WeightTransferTrainerFactory)

    if "weightport" not in WeightTransferEngineFactory._registry:
        WeightTransferEngineFactory.register_engine("weightport", "weightport.vllm.worker",
                                                    "WeightportWeightTransferEngine")
    if "weightport" not in WeightTransferTrainerFactory._registry:
        WeightTransferTrainerFactory.register_engine("weightport", "weightport.vllm.trainer",
                                                     "WeightportTrainerEngine")
