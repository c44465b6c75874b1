"""Deep copies of a running simulation that continue exactly as the original would (:func:`fork_copy`).

A simulation is more than its own attributes: the stack it runs keeps state in closures (the learned stacks'
descheduler cycle, the extender's cluster index, the high level's state and history) and in objects the hooks
reach. :func:`copy.deepcopy` treats functions as atoms, so a plain deep copy of a simulation would share those
closures with the original and the two runs would interfere silently. :func:`fork_copy` deep-copies with three
additions, all within one memo so that every object shared in the original is shared the same way in the copy:

- a function with a closure is re-created around copies of its cells (a cell shared by two closures stays shared);
  functions without a closure, methods of classes and builtins are the same objects (they hold no run state);
- a ``types.MappingProxyType`` becomes a proxy of a copy of the mapping it wraps;
- a lock (``threading.Lock`` / ``RLock``) becomes a new, released lock (a fork is taken between steps, when no
  lock is held).

Objects that cannot be copied (an open socket, a running thread, a server) raise ``TypeError`` naming their type:
a stack that serves over a real socket (the demo's HTTP extender) cannot be forked.

The global :data:`copy._deepcopy_dispatch` entry for functions is swapped for the duration of one call, under a
lock; a simulation is forked from one thread at a time.
"""

from __future__ import annotations

import copy
import threading
import types
from typing import Any, TypeVar

__all__ = ["fork_copy"]

T = TypeVar("T")

_LOCK_TYPES = (type(threading.Lock()), type(threading.RLock()))
_FORK_LOCK = threading.Lock()


def _copy_function(fn: types.FunctionType, memo: dict[int, Any]) -> types.FunctionType:
    if fn.__closure__ is None:
        return fn
    cells = []
    for cell in fn.__closure__:
        key = id(cell)
        if key not in memo:
            try:
                contents = cell.cell_contents
            except ValueError:  # an empty cell (a name assigned later in the enclosing function)
                memo[key] = types.CellType()
            else:
                new = types.CellType()
                memo[key] = new  # before copying the contents: a closure may reach itself through its cell
                new.cell_contents = copy.deepcopy(contents, memo)
        cells.append(memo[key])
    out = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, tuple(cells))
    out.__kwdefaults__ = copy.deepcopy(fn.__kwdefaults__, memo)
    out.__dict__.update(copy.deepcopy(fn.__dict__, memo))
    out.__qualname__ = fn.__qualname__
    out.__module__ = fn.__module__
    return out


def _copy_mappingproxy(m: types.MappingProxyType, memo: dict[int, Any]) -> types.MappingProxyType:
    return types.MappingProxyType(copy.deepcopy(dict(m), memo))


def _copy_lock(lock: Any, memo: dict[int, Any]) -> Any:
    return threading.RLock() if isinstance(lock, _LOCK_TYPES[1]) else threading.Lock()


def fork_copy(obj: T) -> T:
    """A deep copy of ``obj`` whose closures, mapping proxies and locks are copied too (module docstring), so
    that running the copy never changes the original and vice versa. Raises ``TypeError`` for an object that
    cannot be copied (a socket, a thread), naming its type."""
    dispatch = copy._deepcopy_dispatch  # type: ignore[attr-defined]
    extra = {
        types.FunctionType: _copy_function,
        types.MappingProxyType: _copy_mappingproxy,
        **dict.fromkeys(_LOCK_TYPES, _copy_lock),
    }
    with _FORK_LOCK:
        saved = {t: dispatch.get(t) for t in extra}
        dispatch.update(extra)
        try:
            return copy.deepcopy(obj)
        finally:
            for t, v in saved.items():
                if v is None:
                    dispatch.pop(t, None)
                else:
                    dispatch[t] = v
