"""Remember py4j's class and static-method lookups instead of asking the JVM every time.

Every PySpark Column function (``F.col``, ``F.lit``, ``F.coalesce``, ...) and every list it
hands to the JVM (``PythonUtils.toSeq``) resolves a class by name on the gateway's
``JVMView`` and then a static method on that class: two reflection round trips to the JVM
before the call itself. py4j never remembers the answers. A synchronous round builds its
frames anew, so these lookups were 43% of the driver's py4j calls (a 6-row PageRank: 35,194
calls in 86 rounds, 15,064 of them lookups; 35 s -> 25-31 s with them remembered).

What is remembered is what cannot change while the gateway lives: a name that resolved to a
class or a package, and a class member that is a method or a nested class (a
``JavaMember`` is only a name and a target; calling it still goes to the JVM). Static
*fields* are values and are looked up every time, as are names that failed. The memory is
kept on the ``JVMView``/``JavaClass`` object itself, so a new gateway (a new SparkContext)
starts empty.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from py4j import java_gateway

_LOOKUPS = "_fixflow_lookups"


def _remembering(
    lookup: Callable[[Any, str], Any], kinds: tuple[type, ...]
) -> Callable[[Any, str], Any]:
    """``lookup`` (a ``__getattr__``) with its answers of ``kinds`` kept per object."""

    @functools.wraps(lookup)  # sets ``__wrapped__``: how ``install`` knows it is done
    def getattr_remembered(self: Any, name: str) -> Any:
        if java_gateway.is_magic_member(name):  # never asked of Java (py4j's own rule)
            return lookup(self, name)
        # ``self.__dict__`` directly: an absent attribute would call this method again.
        remembered: dict[str, Any] = self.__dict__.setdefault(_LOOKUPS, {})
        found = remembered.get(name)
        if found is None:
            found = lookup(self, name)
            if isinstance(found, kinds):
                remembered[name] = found
        return found

    return getattr_remembered


def install() -> None:
    """Make py4j remember lookups in this process (idempotent)."""
    view, klass = java_gateway.JVMView, java_gateway.JavaClass
    if hasattr(view.__getattr__, "__wrapped__"):
        return
    view.__getattr__ = _remembering(
        view.__getattr__, (java_gateway.JavaClass, java_gateway.JavaPackage)
    )
    klass.__getattr__ = _remembering(
        klass.__getattr__, (java_gateway.JavaMember, java_gateway.JavaClass)
    )
