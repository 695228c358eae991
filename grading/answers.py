"""The data that crosses the trust boundary of grading/fastgrade.py, and nothing else.

The student's process hands back its answer variables, and the outputs of its functions for
inputs the grader chooses, as JSON built only from the tagged forms below.  The grading process
decodes them into plain values (numbers, strings, containers, numpy arrays, pandas objects,
Fractions, random.Random states, objects of the autograder's own classes); it never unpickles,
never imports a module the submission brought and never runs code that came from the student.
Anything else becomes an `Unreadable` placeholder, which equals nothing, so a test that needs it
fails with a one-line reason.

    encode(value, funcs)        -> JSON-able (funcs: a list the student side keeps callables in)
    decode(obj, resolve, call, classes)
                                -> value     (resolve(module, qualname): a class or module the
                                              decoding side accepts, or None; call: a function
                                              proxy maker, or None to refuse functions; classes:
                                              the resolver for objects' classes, resolve if None)

An object crosses as its class and its attributes, and its attributes are data only: a function,
a class or a module inside an object is refused even where `call` and `resolve` accept them.
Otherwise an object could carry the notebook's functions under the names of a module's (a mapping
holding `load_fresh`, sent as `KM`), or a class its own methods would call (a mapping whose key
decoder is a process launcher), and the grader would run them where it means its own code.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction
from pathlib import PurePath, PurePosixPath

MAX_DEPTH = 40
MAX_ITEMS = 20_000_000          # numbers and strings in one message
MAX_BYTES = 256 << 20           # one message


class Unreadable:
    """An answer the grader does not accept as data (a figure, a student-defined object, ...)."""

    def __init__(self, what: str):
        self.what = what

    def __repr__(self) -> str:
        return f"<unreadable answer: {self.what}>"

    def __eq__(self, other):
        return False

    def __hash__(self):
        return id(self)

    def __bool__(self):
        return False


class DecodeError(ValueError):
    pass


def _qual(obj) -> tuple[str, str]:
    return str(getattr(obj, "__module__", "") or ""), str(getattr(obj, "__qualname__", "") or "")


def encode(value, funcs: list | None = None):
    """`value` as tagged JSON.  Callables defined in the notebook are put in `funcs` and sent as
    handles (the grader calls them back through the same channel); None refuses them."""
    import types
    import numpy as np
    import pandas as pd
    budget = [MAX_ITEMS]

    def arr(a):
        a = np.asarray(a)
        budget[0] -= a.size
        if budget[0] < 0:
            raise DecodeError("too much data")
        if a.dtype.kind in "biuf":
            return {"$nd": [a.dtype.str, list(a.shape), a.ravel().tolist()]}
        return {"$nd": ["object", list(a.shape), [enc(x, 2) for x in a.ravel().tolist()]]}

    def index(ix, d):
        if isinstance(ix, pd.MultiIndex):
            return {"$mindex": [[enc(n, d) for n in ix.names],
                                [arr(np.asarray(ix.get_level_values(i), dtype=object))
                                 for i in range(ix.nlevels)]]}
        return {"$index": [enc(ix.name, d), str(ix.dtype), arr(ix.to_numpy())]}

    def enc(v, d=0):
        if d > MAX_DEPTH:
            raise DecodeError("nested too deeply")
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, int):
            return v if type(v) is int else int(v)
        if isinstance(v, float):
            return float(v)
        if isinstance(v, Fraction):
            return {"$frac": [v.numerator, v.denominator]}
        if isinstance(v, complex):
            return {"$complex": [v.real, v.imag]}
        if isinstance(v, (list, tuple, set, frozenset)):
            budget[0] -= len(v)
            if budget[0] < 0:
                raise DecodeError("too much data")
            items = [enc(x, d + 1) for x in v]
            tag = {list: "$list", tuple: "$tuple", set: "$set", frozenset: "$set"}.get(type(v))
            if tag is None:     # a namedtuple, a subclass: plain values only
                tag = "$tuple" if isinstance(v, tuple) else "$list"
            return {tag: items}
        if isinstance(v, dict):
            budget[0] -= len(v)
            return {"$dict": [[enc(k, d + 1), enc(x, d + 1)] for k, x in v.items()]}
        if isinstance(v, np.generic):
            return {"$np": [v.dtype.str, v.item()]} if v.dtype.kind in "biuf" else enc(v.item(), d)
        if isinstance(v, np.ndarray):
            return arr(v)
        if v is pd.NA:
            return {"$na": None}
        if isinstance(v, pd.Series):
            return {"$series": [enc(v.name, d + 1), str(v.dtype), index(v.index, d + 1), arr(v.to_numpy())]}
        if isinstance(v, pd.DataFrame):
            return {"$frame": [index(v.index, d + 1), index(v.columns, d + 1),
                               [str(t) for t in v.dtypes], [arr(v.iloc[:, i].to_numpy())
                                                            for i in range(v.shape[1])]]}
        if isinstance(v, pd.Index):
            return index(v, d + 1)
        if isinstance(v, random.Random):
            ver, state, gauss = v.getstate()
            return {"$random": [ver, list(state), gauss]}
        if isinstance(v, PurePath):
            return {"$path": str(v)}
        if isinstance(v, types.ModuleType):
            return {"$module": v.__name__}
        if isinstance(v, type):
            return {"$ref": list(_qual(v))}
        if callable(v):
            # any other callable is the notebook's to run: the grader calls it back by handle in
            # the student's process, never a function of its own the student names
            if funcs is None:
                return {"$unreadable": "a function"}
            funcs.append(v)
            return {"$func": len(funcs) - 1}
        cls = type(v)
        if hasattr(v, "__dict__") and cls.__module__ not in ("__main__", "builtins"):
            return {"$obj": [cls.__module__, cls.__qualname__, enc(dict(vars(v)), d + 1)]}
        return {"$unreadable": cls.__name__}

    return enc(value)


def decode(obj, resolve, call=None, classes=None):
    """Tagged JSON back to values, strictly: an untagged dict, an unknown tag or a malformed one
    raises DecodeError; a reference the side does not accept becomes an Unreadable."""
    import numpy as np
    import pandas as pd
    classes = classes or resolve
    in_object = [0]             # > 0 while an object's attributes are decoded: data only there

    def arr(o):
        if not (isinstance(o, dict) and set(o) == {"$nd"}):
            raise DecodeError("expected an array")
        dt, shape, flat = o["$nd"]
        if not (isinstance(shape, list) and all(isinstance(s, int) and s >= 0 for s in shape)
                and isinstance(flat, list) and math.prod(shape) == len(flat)):
            raise DecodeError("malformed array")
        if dt == "object":
            a = np.empty(len(flat), dtype=object)
            for i, x in enumerate(flat):
                a[i] = dec(x, 2)
            return a.reshape(shape)
        t = np.dtype(dt)
        if t.kind not in "biuf":
            raise DecodeError(f"array type {dt} not accepted")
        for x in flat:
            if type(x) not in (int, float, bool):
                raise DecodeError("array of numbers holds something else")
        return np.array(flat, dtype=t).reshape(shape)

    def index(o, d):
        if isinstance(o, dict) and set(o) == {"$mindex"}:
            names, levels = o["$mindex"]
            levels = [arr(x) for x in levels]
            return pd.MultiIndex.from_arrays(levels, names=[dec(n, d) for n in names])
        if isinstance(o, dict) and set(o) == {"$index"}:
            name, dtype, values = o["$index"]
            ix = pd.Index(arr(values), name=dec(name, d))
            return _astype(ix, dtype)
        raise DecodeError("expected an index")

    def dec(o, d=0):
        if d > MAX_DEPTH:
            raise DecodeError("nested too deeply")
        if o is None or isinstance(o, (bool, str, int, float)):
            return o
        if not (isinstance(o, dict) and len(o) == 1):
            raise DecodeError(f"untagged {type(o).__name__}")
        (tag, v), = o.items()
        if tag in ("$list", "$tuple", "$set"):
            if not isinstance(v, list):
                raise DecodeError(f"malformed {tag}")
            items = [dec(x, d + 1) for x in v]
            return {"$list": list, "$tuple": tuple, "$set": _set}[tag](items)
        if tag == "$dict":
            out = {}
            for kv in v:
                if not (isinstance(kv, list) and len(kv) == 2):
                    raise DecodeError("malformed $dict")
                k = dec(kv[0], d + 1)
                try:
                    out[k] = dec(kv[1], d + 1)
                except TypeError:
                    raise DecodeError("unhashable key") from None
            return out
        if tag == "$frac":
            n, m = v
            if type(n) is not int or type(m) is not int or m == 0:
                raise DecodeError("malformed $frac")
            return Fraction(n, m)
        if tag == "$complex":
            return complex(float(v[0]), float(v[1]))
        if tag == "$np":
            dt, x = v
            t = np.dtype(dt)
            if t.kind not in "biuf" or type(x) not in (int, float, bool):
                raise DecodeError("malformed $np")
            return t.type(x)
        if tag == "$nd":
            return arr(o)
        if tag == "$na":
            return pd.NA
        if tag == "$series":
            name, dtype, ix, values = v
            s = pd.Series(arr(values), index=index(ix, d + 1), name=dec(name, d + 1))
            return _astype(s, dtype)
        if tag == "$frame":
            ix, cols, dtypes, data = v
            ix, cols = index(ix, d + 1), index(cols, d + 1)
            if not (len(dtypes) == len(data) == len(cols)):
                raise DecodeError("malformed $frame")
            frame = pd.DataFrame({i: arr(c) for i, c in enumerate(data)}, index=ix)
            if len(data) == 0:
                frame = pd.DataFrame(index=ix, columns=cols)
            frame.columns = cols
            for i, t in enumerate(dtypes):
                if str(frame.dtypes.iloc[i]) != t:
                    frame[frame.columns[i]] = _astype(frame.iloc[:, i], t)
            return frame
        if tag in ("$index", "$mindex"):
            return index(o, d)
        if tag == "$random":
            ver, state, gauss = v
            r = random.Random()
            try:
                r.setstate((ver, tuple(state), gauss))
            except (TypeError, ValueError):
                raise DecodeError("malformed $random") from None
            return r
        if tag == "$path":
            p = PurePosixPath(str(v))
            if p.is_absolute() or ".." in p.parts:
                return Unreadable(f"the path {str(v)[:60]!r} (only paths inside the submission)")
            from pathlib import Path
            return Path(p)
        if tag == "$module":
            if in_object[0]:
                return Unreadable("a module inside an object")
            m = resolve(str(v), None)
            return m if m is not None else Unreadable(f"module {str(v)[:60]}")
        if tag == "$ref":
            mod, qual = v
            if in_object[0]:
                return Unreadable("a class inside an object")
            x = classes(str(mod), str(qual))
            return x if x is not None else Unreadable(f"{str(mod)[:40]}.{str(qual)[:40]}")
        if tag == "$obj":
            mod, qual, state = v
            cls = classes(str(mod), str(qual))
            if not isinstance(cls, type):
                return Unreadable(f"an object of {str(mod)[:40]}.{str(qual)[:40]}")
            in_object[0] += 1
            try:
                state = dec(state, d + 1)
            finally:
                in_object[0] -= 1
            if not isinstance(state, dict):
                raise DecodeError("malformed $obj")
            import dataclasses
            if dataclasses.is_dataclass(cls) and not set(state) <= {f.name for f in dataclasses.fields(cls)}:
                return Unreadable(f"an object of {str(mod)[:40]}.{str(qual)[:40]} with other attributes")
            try:
                x = cls.__new__(cls)
                x.__dict__.update(state)
            except (AttributeError, TypeError):     # a class whose objects hold no attributes
                return Unreadable(f"an object of {str(mod)[:40]}.{str(qual)[:40]}")
            return x
        if tag == "$func":
            if call is None or type(v) is not int:
                return Unreadable("a function")
            if in_object[0]:
                return Unreadable("a function inside an object")
            return call(v)
        if tag == "$unreadable":
            return Unreadable(str(v)[:60])
        raise DecodeError(f"unknown tag {tag[:20]!r}")

    return dec(obj)


def _set(items):
    try:
        return set(items)
    except TypeError:
        raise DecodeError("unhashable set item") from None


def _astype(x, dtype: str):
    """`x` (an Index or Series of values) with the pandas dtype it was sent with."""
    if str(x.dtype) == dtype:
        return x
    try:
        return x.astype(dtype)
    except (TypeError, ValueError):
        return x


def update_in_place(old, new) -> None:
    """After a call into the student's process: an argument that is state the function is meant
    to change takes the state the call left it in (a random.Random it drew from, an object of
    an autograder data class it updated, lab 5's Host and Arm).  A list, a dict or an array
    keeps the grader's own contents: a function that emptied them would otherwise empty them
    for the reference the test runs next."""
    import dataclasses
    if isinstance(old, random.Random) and isinstance(new, random.Random):
        old.setstate(new.getstate())
    elif type(old) is type(new) and dataclasses.is_dataclass(old) and not isinstance(old, type):
        old.__dict__.clear()
        old.__dict__.update(new.__dict__)
