"""Where each decoding row's keys and values lie in the cache, as our attention kernel reads
them (`chatapp::decode_attention_rows`) and a step's own are stored through them
(`chatapp::store_rows`): one table for a step's rows, whichever cache groups hold them."""

import torch


def row_table(groups) -> torch.Tensor:
    """[rows, 6] int64 for rows of cache groups, in order: for (keys, values, row numbers) of each
    group ([layers, rows, kv_heads, capacity, dim] each, the same strides), each row's keys' and
    values' addresses at layer 0, key head 0, the elements from a layer to the next and from a
    key head to the next, its capacity and its layers. The caller keeps the tensors alive while
    it is used."""
    entries = []
    for keys, values, numbers in groups:
        row_bytes = keys.stride(1) * keys.element_size()
        entries += [[keys.data_ptr() + row * row_bytes, values.data_ptr() + row * row_bytes, keys.stride(0),
                     keys.stride(2), keys.shape[3], keys.shape[0]] for row in numbers]
    return torch.tensor(entries, dtype=torch.long)
