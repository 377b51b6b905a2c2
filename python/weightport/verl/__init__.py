"""weightport as verl's weight-sync backend.

Importing this module registers the ``"weightport"`` checkpoint engine in verl's
``CheckpointEngineRegistry``. In a verl config::

    actor_rollout_ref.rollout.checkpoint_engine.backend=weightport
    actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module=weightport.verl

verl imports the module in every trainer and rollout worker itself; no verl patch is needed.
Options go under ``checkpoint_engine.engine_kwargs.weightport`` (see :data:`OPTIONS`).
"""

from .engine import OPTIONS, WeightportCheckpointEngine

__all__ = ["WeightportCheckpointEngine", "OPTIONS"]
