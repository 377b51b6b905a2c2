"""weightport: move model weights from the ranks that hold them to the ranks that use them.

Trainer ranks register their tensors with a :class:`Publisher` and publish versions; inference
ranks bind their model to a :class:`Subscriber` and swap to new versions. A plan is made once from
both sides' layouts (resharding between them, converting dtypes where they differ) and replayed for
every version with one-sided transfers; every chunk is checked and a version is committed only when
every subscriber has all of it.
"""

from . import _core, naming
from .errors import (AlreadyExists, Cancelled, DataLoss, Error, FailedPrecondition, Internal, InvalidArgument,
                     IoError, NotFound, OutOfRange, PermissionDenied, ResourceExhausted, Timeout, Unavailable,
                     Unimplemented, WrongType)
from .federated import FedClient, FedServer
from .layouts import Layout, Sharded, TensorParallel, Whole
from .naming import Rename
from .publisher import Coordinator, Publisher
from .subscriber import PinnedVersion, Subscriber

_core._set_exception_types({name: value for name, value in dict(globals()).items()
                            if isinstance(value, type) and issubclass(value, Error)})

__version__ = "0.1.0"
__all__ = ["Publisher", "Coordinator", "Subscriber", "PinnedVersion", "FedServer", "FedClient", "Layout", "Whole", "Sharded", "TensorParallel", "Rename", "naming", "Error",
           "InvalidArgument", "NotFound", "AlreadyExists", "OutOfRange", "FailedPrecondition", "DataLoss",
           "IoError", "Timeout", "Unavailable", "PermissionDenied", "ResourceExhausted", "Cancelled",
           "Unimplemented", "Internal", "WrongType"]
