"""Keys and values of every running sequence, in groups of rows that grow with their longest member.

A sequence owns one row of one group for its whole life. Attention for all decoding rows of a
group is one batched call over a plain tensor slice (no gather, no copy), and a group's memory
is sized for the longest sequence it holds, so short and long requests placed in different
groups do not pay for each other. A group whose last row is freed gives its memory back.
A row is sized at admission for prompt + max_tokens, so a running sequence never runs out of
room; `max_tokens` bounds the memory actually allocated (rows x capacity of every group).

A row is free, reserved by a running sequence, or kept: a finished sequence's keys and values
left in place for a later request that starts with the same tokens (prefix_cache.py decides
which). A kept row holds memory only until a reservation needs it: `drop` frees it, `adopt`
hands it to a new sequence as it is, `copy_prefix` copies its first tokens into another row.

On the CPU a group's tensors come from an anonymous private mapping: the kernel hands it out
zero-filled and a page becomes resident only when a token is written to it, so a new group
costs nothing up front (zeroing 100 MB took about 25 ms of a step here) and the process holds
the tokens really written, not every reservation's worst case. A row that is freed or dropped
gives its pages back at once (`madvise(MADV_DONTNEED)`: they read as zeros again), so a group
that stays because other rows live in it holds only its live and kept rows' tokens.
"""

import math
import mmap
from dataclasses import dataclass

import torch

# Capacities are whole blocks, so that a group grows rarely.
BLOCK_TOKENS = 64


@dataclass(frozen=True)
class CacheSlot:
    group: int
    row: int


@dataclass(frozen=True)
class CacheShape:
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype
    device: torch.device

    @property
    def bytes_per_token(self) -> int:
        element = torch.empty((), dtype=self.dtype).element_size()
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * element


class _Group:
    def __init__(self, shape: CacheShape, rows: int, capacity: int):
        size = (shape.num_layers, rows, shape.num_kv_heads, capacity, shape.head_dim)
        self.keys = _Zeros(size, shape.dtype, shape.device)
        self.values = _Zeros(size, shape.dtype, shape.device)
        self.reserved: list[int] = [0] * rows  # 0 marks a row no running sequence holds
        self.kept: dict[int, int] = {}  # kept row -> tokens its keys and values stand for

    @property
    def capacity(self) -> int:
        return self.keys.tensor.shape[3]

    @property
    def free_rows(self) -> list[int]:
        return [row for row, reserved in enumerate(self.reserved) if reserved == 0 and row not in self.kept]

    @property
    def is_empty(self) -> bool:
        return len(self.free_rows) == len(self.reserved)

    def grow(self, capacity: int) -> None:
        """A larger capacity for every row; only rows in use are copied (a free row stays unwritten)."""
        in_use = [row for row, reserved in enumerate(self.reserved) if reserved or row in self.kept]
        for name in ("keys", "values"):
            old = getattr(self, name)
            new = _Zeros((*old.tensor.shape[:3], capacity, old.tensor.shape[4]), old.tensor.dtype,
                         old.tensor.device)
            for row in in_use:
                new.tensor[:, row, :, : old.tensor.shape[3]] = old.tensor[:, row]
            setattr(self, name, new)

    def discard(self, row: int) -> None:
        """Gives a row's memory back; it reads as zeros again."""
        self.keys.discard(row)
        self.values.discard(row)


class KVCache:
    def __init__(self, shape: CacheShape, max_tokens: int, max_rows: int, group_size: int):
        self.shape = shape
        self.max_tokens = max_tokens
        self.max_rows = max_rows
        self.group_size = min(group_size, max_rows)
        # More groups than rows strictly need, so that requests of different lengths can keep
        # to groups of their own size; memory stays bounded by max_tokens.
        self.groups: list[_Group | None] = [None] * max_rows
        self.num_reserved_tokens = 0

    # --- reservation ---
    @property
    def max_sequence_tokens(self) -> int:
        """The longest sequence that fits at all: a fresh group of rows that long."""
        return self.max_tokens // self.group_size // BLOCK_TOKENS * BLOCK_TOKENS

    def can_allocate(self, num_tokens: int) -> bool:
        if self.num_used_rows >= self.max_rows:
            return False
        return self._placement(_blocks(num_tokens)) is not None

    def allocate(self, num_tokens: int) -> CacheSlot:
        if not self.can_allocate(num_tokens):
            raise RuntimeError("no room in the KV cache; check can_allocate first")
        needed = _blocks(num_tokens)
        index = self._placement(needed)
        group = self.groups[index]
        if group is None:
            group = self.groups[index] = _Group(self.shape, self.group_size, needed)
        elif group.capacity < needed:
            group.grow(needed)
        row = group.free_rows[0]
        group.reserved[row] = needed
        self.num_reserved_tokens += needed
        return CacheSlot(index, row)

    def free(self, slot: CacheSlot) -> None:
        self._unreserve(slot)
        self._release(slot)

    # --- kept rows ---
    def keep(self, slot: CacheSlot, num_tokens: int) -> None:
        """A running sequence's row stays as it is, its first `num_tokens` for a later request to reuse."""
        self._unreserve(slot)
        self.groups[slot.group].kept[slot.row] = num_tokens

    def drop(self, slot: CacheSlot) -> None:
        """A kept row becomes free."""
        del self.groups[slot.group].kept[slot.row]
        self._release(slot)

    def can_adopt(self, slot: CacheSlot, num_tokens: int) -> bool:
        return self.groups[slot.group].capacity >= _blocks(num_tokens)

    def adopt(self, slot: CacheSlot, num_tokens: int) -> None:
        """A kept row becomes a new sequence's reservation, its cached tokens untouched."""
        if not self.can_adopt(slot, num_tokens):
            raise RuntimeError("the kept row is too short for this sequence; check can_adopt first")
        group = self.groups[slot.group]
        del group.kept[slot.row]
        group.reserved[slot.row] = _blocks(num_tokens)
        self.num_reserved_tokens += group.reserved[slot.row]

    def copy_prefix(self, source: CacheSlot, target: CacheSlot, num_tokens: int) -> None:
        """The first `num_tokens` keys and values of every layer, from one row into another."""
        origin, destination = self.groups[source.group], self.groups[target.group]
        for name in ("keys", "values"):
            into = getattr(destination, name).tensor[:, target.row, :, :num_tokens]
            into.copy_(getattr(origin, name).tensor[:, source.row, :, :num_tokens])

    def _unreserve(self, slot: CacheSlot) -> None:
        group = self.groups[slot.group]
        self.num_reserved_tokens -= group.reserved[slot.row]
        group.reserved[slot.row] = 0

    def _release(self, slot: CacheSlot) -> None:
        """A row that nobody holds any more gives its memory back, its group too when empty."""
        group = self.groups[slot.group]
        if group.is_empty:
            self.groups[slot.group] = None
        else:
            group.discard(slot.row)

    def _placement(self, needed: int) -> int | None:
        """The group for a sequence of `needed` tokens, in order of preference, within budget.

        A group about its size, else a new group, else any group big enough, else the largest
        group grown: short and long sequences keep apart while memory allows.
        """
        open_groups = [(i, g) for i, g in enumerate(self.groups) if g is not None and g.free_rows]
        empty = [i for i, g in enumerate(self.groups) if g is None]
        candidates = [
            min(((g.capacity, i) for i, g in open_groups if needed <= g.capacity <= 2 * needed),
                default=(0, None))[1],
            empty[0] if empty else None,
            min(((g.capacity, i) for i, g in open_groups if g.capacity >= needed), default=(0, None))[1],
            max(((g.capacity, i) for i, g in open_groups), default=(0, None))[1],
        ]
        for index in candidates:
            if index is not None and self.num_allocated_tokens + self._extra(index, needed) <= self.max_tokens:
                return index
        return None

    def _extra(self, index: int, needed: int) -> int:
        """Token places the placement would add to memory."""
        group = self.groups[index]
        if group is None:
            return self.group_size * needed
        return len(group.reserved) * max(0, needed - group.capacity)

    # --- tensors ---
    def tensors(self, group: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of every layer of one group: [layers, rows, kv_heads, capacity, head_dim]."""
        cached = self.groups[group]
        return cached.keys.tensor, cached.values.tensor

    def layer(self, group: int, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of one layer of one group: [rows, kv_heads, capacity, head_dim]."""
        keys, values = self.tensors(group)
        return keys[layer], values[layer]

    # --- accounting ---
    @property
    def num_allocated_tokens(self) -> int:
        """Token places held in memory: rows x capacity over every group."""
        return sum(len(g.reserved) * g.capacity for g in self.groups if g is not None)

    @property
    def num_allocated_bytes(self) -> int:
        return self.num_allocated_tokens * self.shape.bytes_per_token

    @property
    def num_used_rows(self) -> int:
        """Rows held by running sequences."""
        return sum(1 for g in self.groups if g is not None for reserved in g.reserved if reserved)

    @property
    def num_kept_rows(self) -> int:
        return sum(len(g.kept) for g in self.groups if g is not None)

    @property
    def num_kept_tokens(self) -> int:
        """Tokens whose keys and values kept rows hold: what they keep resident."""
        return sum(sum(g.kept.values()) for g in self.groups if g is not None)

    @property
    def num_reusable_bytes(self) -> int:
        """Memory held only by kept rows: given back as soon as a reservation needs it."""
        tokens = sum(len(g.reserved) * g.capacity for g in self.groups
                     if g is not None and g.kept and not any(g.reserved))
        return tokens * self.shape.bytes_per_token

    @property
    def usage(self) -> float:
        return self.num_allocated_tokens / self.max_tokens


def _blocks(num_tokens: int) -> int:
    return -(-num_tokens // BLOCK_TOKENS) * BLOCK_TOKENS


class _Zeros:
    """A zero-filled tensor whose rows (dimension 1) can give their memory back one at a time.

    On the CPU it lives in an anonymous private mapping: pages become resident when written,
    and `discard` returns a row's pages to the kernel, after which they read as zeros again.
    Elsewhere it is an ordinary tensor, and `discard` leaves the stale values in place: nobody
    reads past the tokens a row's owner wrote.
    """

    def __init__(self, size: tuple[int, ...], dtype: torch.dtype, device: torch.device):
        self._mapping = None
        if device.type != "cpu":
            self.tensor = torch.zeros(size, dtype=dtype, device=device)
            return
        count = math.prod(size)
        # Private, so that reading a page never written maps the kernel's zero page, not memory.
        # One page before the tensor, never written (so never resident): no row starts at offset
        # 0, which torch.compile would give a graph of its own (decode_graph.py), and every row
        # stays where it would be on its own pages.
        self._lead_bytes = mmap.PAGESIZE
        lead = self._lead_bytes // dtype.itemsize
        self._mapping = mmap.mmap(-1, self._lead_bytes + count * dtype.itemsize,
                                  flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.tensor = torch.frombuffer(self._mapping, dtype=dtype, count=lead + count)[lead:].view(size)

    def discard(self, row: int) -> None:
        if self._mapping is None:
            return
        layers, rows = self.tensor.shape[:2]
        row_bytes = self.tensor[0, 0].numel() * self.tensor.element_size()
        for layer in range(layers):
            start = self._lead_bytes + (layer * rows + row) * row_bytes
            # Whole pages inside the row only: a page shared with a neighbour stays.
            first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
            last = (start + row_bytes) // mmap.PAGESIZE * mmap.PAGESIZE
            if last > first:
                self._mapping.madvise(mmap.MADV_DONTNEED, first, last - first)
