"""ucudnn for Python: the client library's shape-level C API (ucudnn/client/ucudnn_shape.h)
through ctypes, and a PyTorch adapter in ``ucudnn.torch`` (imported on its own, so that
``import ucudnn`` needs no PyTorch)."""

from ._lib import Library, LibraryNotFound, ShapeError, find_library, load

__all__ = ["Library", "LibraryNotFound", "ShapeError", "find_library", "load"]
