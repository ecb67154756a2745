"""The map's batch update, compiled (``_prefixtree.c``): ``vmap._Batch`` over the same objects."""

from collections.abc import Callable

from deplog.client.model.vmap import ChildRef, InnerNode

_Row = tuple[InnerNode, bytes | None, bytes | None, bytes | None]

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
def update_groups(
    keys: list[bytes],
    values: list[bytes],
    root: ChildRef | None,
    root_value: bytes | None,
    held: tuple[dict[bytes, bytes], ...],
    read: Callable[[bytes], bytes | None],
    ref_type: type[ChildRef],
    /,
) -> tuple[ChildRef, bytes | None, dict[bytes, bytes]]: ...
def decode_group(
    blob: bytes, ref_type: type[ChildRef], inner_type: type[InnerNode], /
) -> dict[bytes, _Row]: ...
def sha256(data: bytes, /) -> bytes: ...
def use_sha_extensions(flag: bool, /) -> bool: ...
