"""How a collective and an impl cross into the native extensions: as their enums, decoded nowhere
else."""

from typing import Optional


def native_call(native, coll, algorithm: Optional[str]) -> tuple:
    """(Collective, Algorithm) of `native` (commbench._host or commbench._cuda) for `coll` by our
    `algorithm`, or by the library's call (None)."""
    return native.Collective.__members__[coll.name], native.Algorithm.__members__[algorithm or "library"]
