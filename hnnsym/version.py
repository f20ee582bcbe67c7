"""The version of hnnsym, written here only (the package metadata and ``hnnsym.__version__`` read
it; a module of its own, so that any layer may import it without importing the package)."""

__version__ = "0.1.0"
