"""How a collective and an impl cross into the native extensions: as their enums, decoded nowhere
else."""


def native_call(native, coll, impl: str, transport: str) -> tuple:
    """(Collective, Algorithm) of `native` (commbench._host or commbench._cuda) for `coll` by `impl` on
    `transport`: the impl named after the transport is the library's call, any other is our algorithm
    of that name."""
    algorithm = "library" if impl == transport else impl
    return native.Collective.__members__[coll.name], native.Algorithm.__members__[algorithm]
