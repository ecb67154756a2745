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
def group_nodes(
    inners: list[InnerNode], where: dict[bytes, bytes], /
) -> dict[bytes, list[InnerNode]]: ...
def group_rows(
    touched: dict[bytes, list[InnerNode]],
    before: dict[bytes, dict[bytes, _Row]],
    leaves: dict[bytes, bytes],
    root_leaf: Callable[[], tuple[bytes, bytes] | None],
    /,
) -> dict[bytes, dict[bytes, _Row]]: ...
def decode_group(
    blob: bytes, ref_type: type[ChildRef], inner_type: type[InnerNode], /
) -> dict[bytes, _Row]: ...
def encode_group(group: dict[bytes, _Row], /) -> tuple[dict[bytes, _Row], bytes]: ...
def sha256(data: bytes, /) -> bytes: ...
def use_sha_extensions(flag: bool, /) -> bool: ...
