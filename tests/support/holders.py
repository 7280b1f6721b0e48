"""Who keeps an object alive that should be garbage: referrer chains for a failure message."""

from __future__ import annotations

import gc
import sys
import threading
import types
from typing import Any


def _name(obj: Any) -> str:
    if isinstance(obj, types.FrameType):
        return f"frame {obj.f_code.co_name} ({obj.f_code.co_filename.rsplit('/', 1)[-1]}:{obj.f_lineno})"
    if isinstance(obj, types.MethodType):
        return f"bound method {obj.__func__.__qualname__}"
    if isinstance(obj, types.FunctionType):
        return f"function {obj.__qualname__}"
    if isinstance(obj, types.CellType):
        return "cell"
    if isinstance(obj, dict):
        return f"dict({', '.join(map(str, list(obj)[:6]))})"
    if isinstance(obj, (list, tuple, set, frozenset)):
        return f"{type(obj).__name__} of {len(obj)}"
    return type(obj).__qualname__


def _stack(frame: types.FrameType | None) -> list[types.FrameType]:
    frames = []
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    return frames


def holders(obj: Any, depth: int = 4, width: int = 4) -> str:
    """Chains of what refers to ``obj``, ``depth`` levels up, ``width`` referrers a level
    (the caller's own frames and lists left out), as indented lines."""
    gc.collect()
    # The garbage collector does not see what a running function of another thread holds
    # (Python 3.11+): look through every thread's frames' locals, so a thread still working
    # with the object shows up as "frame <function> (<file>:<line>)".
    names = {t.ident: t.name for t in threading.enumerate()}
    in_frames: dict[int, list[str]] = {}
    for ident, top in sys._current_frames().items():
        if ident == threading.get_ident():
            continue
        for frame in _stack(top):
            for value in list(frame.f_locals.values()):
                in_frames.setdefault(id(value), []).append(f"{_name(frame)} in thread {names.get(ident, ident)}")
    ignore = {id(sys._getframe())}
    lines: list[str] = []
    seen: set[int] = set()

    def walk(o: Any, level: int) -> None:
        if level > depth or id(o) in seen:
            return
        seen.add(id(o))
        if isinstance(o, types.ModuleType) or isinstance(o, dict) and "__builtins__" in o:
            return  # a module's globals: far enough
        for where in in_frames.get(id(o), []):
            lines.append("  " * level + where)
        found = gc.get_referrers(o)
        ignore.add(id(found))
        shown = 0
        for i in range(len(found)):
            r = found[i]
            if id(r) in ignore or isinstance(r, types.FrameType) and r.f_code.co_filename == __file__:
                continue
            lines.append("  " * level + _name(r))
            shown += 1
            walk(r, level + 1)
            if shown >= width:
                break

    lines.append(_name(obj))
    walk(obj, 1)
    return "\n".join(lines)
