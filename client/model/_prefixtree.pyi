"""The map's batch update, compiled (``_prefixtree.c``): ``vmap._Batch`` over the same objects."""

from collections.abc import Callable

from deplog.client.model.vmap import ChildRef, InnerNode

def update(
    keys: list[bytes],
    values: list[bytes],
    root: ChildRef | None,
    held: dict[bytes, InnerNode],
    row: Callable[[bytes], InnerNode],
    written: list[InnerNode],
    ref_type: type[ChildRef],
    inner_type: type[InnerNode],
    /,
) -> ChildRef: ...
def sha256(data: bytes, /) -> bytes: ...
def use_sha_extensions(flag: bool, /) -> bool: ...
