"""Cython's pure-Python-mode decorators for a process that runs the sources without Cython
installed: each does nothing, as Cython's own pure-Python module does. A compiled module
takes the real ones (the compiler reads ``import cython`` itself)."""

from __future__ import annotations

from typing import TypeVar

__all__ = ["cclass", "no_gc"]

T = TypeVar("T")


def cclass(cls: T) -> T:
    """An extension type when compiled; a plain class here."""
    return cls


def no_gc(cls: T) -> T:
    """Not tracked by the cyclic collector when compiled; nothing here."""
    return cls
