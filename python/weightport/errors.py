"""weightport's exceptions: one class per error code of the C++ engine, raised with its message.

Every class derives from :class:`weightport.Error`, and where a built-in exception means the same
thing, from that too (``weightport.Timeout`` is a ``TimeoutError``, ``weightport.InvalidArgument``
a ``ValueError``), so either can be caught.
"""


class Error(RuntimeError):
    """Base class of every error weightport raises."""


class InvalidArgument(Error, ValueError):
    """A value given to weightport is not valid (names the value)."""


class WrongType(InvalidArgument, TypeError):
    """A value of the wrong type was given (a TypeError too)."""


class NotFound(Error, LookupError):
    """A tensor, file or rank that was named does not exist."""


class AlreadyExists(Error):
    """Something that must be unique was given twice."""


class OutOfRange(Error, IndexError):
    """An index or version outside what exists."""


class FailedPrecondition(Error):
    """The call does not fit the current state (e.g. no version committed yet)."""


class DataLoss(Error):
    """Data failed a check (hash mismatch after every retry)."""


class IoError(Error, OSError):
    """An operating-system call failed (a file that cannot be read, say)."""


class Timeout(Error, TimeoutError):
    """A wait ran past its timeout."""


class Unavailable(Error, ConnectionError):
    """A peer or the coordinator is unreachable, or a version was aborted."""


class PermissionDenied(Error, PermissionError):
    """Authentication failed, or the coordinator refused this rank (the reason is in the message)."""


class ResourceExhausted(Error):
    """Memory or another resource ran out."""


class Cancelled(Error):
    """The operation was cancelled (the session ended before it finished)."""


class Unimplemented(Error, NotImplementedError):
    """The feature is not available in this build."""


class Internal(Error):
    """A bug in weightport: please report it with the message."""


__all__ = [name for name, value in dict(globals()).items() if isinstance(value, type) and issubclass(value, Error)]
