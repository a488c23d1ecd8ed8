// A decode step's attention: each row's few queries over its cached keys and its own new key.
//
// queries [B, kv_heads, group, dim]; each row's cached keys and values found through a table
// (`decode_attention_rows`), so that a step's rows may lie in any of the cache's groups;
// positions [B]: a row sees its first positions[b] cached keys; key, value [B, kv_heads, dim]:
// the step's own, not yet in the cache (`store_rows` writes them through the same table).
// Returns [B, kv_heads, group, dim] in the queries' dtype; the arithmetic is float32 throughout.
//
// Why our own: written as products and sums in the compiled step, inductor's loops took about
// 24 ns per key and query head (a horizontal sum per key, a score buffer read four times, one
// thread: the row count is the only loop it shares among threads): over a 600-token context,
// 3.2 ms of a 13.2 ms bfloat16 step at one stream.
//
// The work: a task is one row's key head over a stretch of its keys (`Stretch`), for the whole
// group of query heads that share the key head, so that each key and value is read from memory
// once, converted to float32 once, and used by every query of the group. A lone stream has
// fewer key heads (3 in the default model) than a step has threads to keep busy evenly, so a
// row's keys are split into stretches until there are `kTasksPerThread` tasks a thread; each
// stretch keeps its own softmax (its largest score, its weights' sum, its values' weighted sum),
// and the stretches of a row's head are merged after (as flash-decoding does on a GPU). Against
// the first version of this kernel (a task a query head, one key at a time), bfloat16 on an
// AVX-512 AMD EPYC, 2 threads, 3 key heads x 3 queries, 64 dims, one call: one row over 600 keys
// 14.9 against 34.1 us, over 2,000 37.9 against 108, four rows over 600 47 against 118.
#include <torch/library.h>
#include "shim.h"
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>

#include "attention_tasks.h"

namespace {

using namespace chatapp_attention;

// Rows: b -> RowCache<T>, row b's cache.
template <int64_t Dim, typename T, typename Rows>
void attend(const at::Tensor& queries, const Rows& rows_cache, const at::Tensor& positions, const at::Tensor& key,
            const at::Tensor& value, double scaling, at::Tensor& out) {
  Attention<Dim, T> work;
  work.rows = queries.size(0), work.kv_heads = queries.size(1), work.group = queries.size(2);
  work.dim = Dim > 0 ? Dim : queries.size(3);
  work.queries = queries.const_data_ptr<T>();
  work.own_keys = key.const_data_ptr<T>(), work.own_values = value.const_data_ptr<T>();
  work.key_row = key.stride(0), work.key_head = key.stride(1);
  work.value_row = value.stride(0), work.value_head = value.stride(1);
  work.scaling = static_cast<float>(scaling);
  const int64_t* seen = positions.const_data_ptr<int64_t>();
  work.caches.resize(work.rows);
  work.counts.resize(work.rows);
  for (int64_t b = 0; b < work.rows; ++b) {
    work.caches[b] = rows_cache(b);
    work.counts[b] = std::clamp<int64_t>(seen[b], 0, work.caches[b].capacity);
  }
  work.plan(at::get_num_threads());
  at::parallel_for(0, work.tasks(), 1, [&](int64_t begin, int64_t end) { work.run(begin, end); });
  T* o = out.mutable_data_ptr<T>();
  at::parallel_for(0, work.query_count(), std::max<int64_t>(1, 64 / work.stretches),
                   [&](int64_t begin, int64_t end) { work.merge(begin, end, o); });
}

// The head sizes most models have, their loops unrolled.
template <typename T, typename Rows>
void dispatch(int64_t dim, const at::Tensor& queries, const Rows& rows, const at::Tensor& positions,
              const at::Tensor& key, const at::Tensor& value, double scaling, at::Tensor& out) {
  switch (dim) {
    case 64: return attend<64, T>(queries, rows, positions, key, value, scaling, out);
    case 128: return attend<128, T>(queries, rows, positions, key, value, scaling, out);
    default: return attend<0, T>(queries, rows, positions, key, value, scaling, out);
  }
}

// The positions as int64, contiguous: those given where they are so already (each layer's call
// would otherwise go through the dispatcher to find nothing to convert).
at::Tensor long_positions(const at::Tensor& positions) {
  return positions.scalar_type() == at::kLong && positions.is_contiguous() ? positions
                                                                           : positions.to(at::kLong).contiguous();
}

// What the attention checks of the queries and the step's own keys and values; returns the
// queries, contiguous.
at::Tensor checked_queries(const char* name, const at::Tensor& queries, const at::Tensor& positions,
                           const at::Tensor& key, const at::Tensor& value) {
  TORCH_CHECK(queries.dim() == 4 && key.dim() == 3 && value.dim() == 3, name,
              ": queries [B, kv_heads, group, dim], key and value [B, kv_heads, dim]");
  const int64_t dim = queries.size(3);
  TORCH_CHECK(dim <= kMostDim, name, ": at most ", kMostDim, " dims a head");
  TORCH_CHECK(key.size(0) == queries.size(0) && key.size(1) == queries.size(1) && key.size(2) == dim &&
                  value.sizes() == key.sizes(),
              name, ": the step's key and value must be [B, kv_heads, dim]");
  TORCH_CHECK(key.stride(2) == 1 && value.stride(2) == 1, name, ": the step's key's dims must be contiguous");
  TORCH_CHECK(positions.dim() == 1 && positions.size(0) == queries.size(0), name, ": one position a row");
  const at::ScalarType dtype = queries.scalar_type();
  TORCH_CHECK((dtype == at::kFloat || dtype == at::kBFloat16) && key.scalar_type() == dtype &&
                  value.scalar_type() == dtype,
              name, ": float32 or bfloat16, the queries as the cache");
  return queries.contiguous();
}

// Each row's cache is found through `table` [B, 6] (int64, `row_table.py`): the address of
// layer 0's key head 0 of its keys, the same of its values (in the queries' dtype), the elements
// from one layer to the next, from one key head to the next, the keys a head holds, and the
// layers. Rows may so lie in different tensors (the cache groups of a step's streams) and
// `layer` picks the layer. The caller keeps those tensors alive and unchanged during the call.
at::Tensor decode_attention_rows(const at::Tensor& queries_in, const at::Tensor& table, int64_t layer,
                                 const at::Tensor& positions_in, const at::Tensor& key, const at::Tensor& value,
                                 double scaling) {
  const at::Tensor queries = checked_queries("decode_attention_rows", queries_in, positions_in, key, value);
  check_table("decode_attention_rows", table, queries.size(0), layer, 1);
  const at::Tensor positions = long_positions(positions_in);
  at::Tensor out = at::detail::empty_cpu(queries.sizes(), queries.scalar_type());
  const int64_t* rows = table.const_data_ptr<int64_t>();
  if (queries.scalar_type() == at::kFloat)
    dispatch<float>(queries.size(3), queries, TableRows<float>{rows, layer}, positions, key, value, scaling, out);
  else
    dispatch<c10::BFloat16>(queries.size(3), queries, TableRows<c10::BFloat16>{rows, layer}, positions, key, value,
                            scaling, out);
  return out;
}

// Writes a step's own keys and values, [layers, B, kv_heads, dim] each, into each row's cache
// found through decode_attention_rows' table, at the row's position, layers from `first_layer`
// on (the compiled step stores every layer's after its call, the fused forward each layer's in
// turn). Every position and layer is checked against its row's cache before anything is
// written. In place of two indexed writes over the cache's permuted views (torch's index_put_:
// about 0.6 ms a one-stream step in bf16, for 11 KB of keys and values), one copy of `dim`
// elements a row, layer and key head.
void store_rows(const at::Tensor& table, const at::Tensor& positions_in, const at::Tensor& keys_in,
                const at::Tensor& values_in, int64_t first_layer) {
  TORCH_CHECK(keys_in.dim() == 4 && values_in.sizes() == keys_in.sizes(),
              "store_rows: keys and values [layers, B, kv_heads, dim]");
  const int64_t layers = keys_in.size(0), rows = keys_in.size(1), kv_heads = keys_in.size(2), dim = keys_in.size(3);
  check_table("store_rows", table, rows, first_layer, layers);
  TORCH_CHECK(positions_in.dim() == 1 && positions_in.size(0) == rows, "store_rows: one position a row");
  const at::ScalarType dtype = keys_in.scalar_type();
  TORCH_CHECK((dtype == at::kFloat || dtype == at::kBFloat16) && values_in.scalar_type() == dtype,
              "store_rows: float32 or bfloat16 keys and values, both alike");
  const at::Tensor keys = keys_in.contiguous(), values = values_in.contiguous();
  const at::Tensor positions = long_positions(positions_in);
  const int64_t* entries = table.const_data_ptr<int64_t>();
  const int64_t* at = positions.const_data_ptr<int64_t>();
  check_positions("store_rows", entries, at, rows);
  const int64_t bytes = dim * keys.element_size();
  const char* new_keys = static_cast<const char*>(keys.const_data_ptr());
  const char* new_values = static_cast<const char*>(values.const_data_ptr());
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t* row = entries + b * kTableColumns;
    char* row_keys = reinterpret_cast<char*>(static_cast<uintptr_t>(row[0]));
    char* row_values = reinterpret_cast<char*>(static_cast<uintptr_t>(row[1]));
    for (int64_t layer = 0; layer < layers; ++layer)
      for (int64_t h = 0; h < kv_heads; ++h) {
        const int64_t to = ((first_layer + layer) * row[2] + h * row[3] + at[b] * dim) * keys.element_size();
        const int64_t from = ((layer * rows + b) * kv_heads + h) * bytes;
        std::memcpy(row_keys + to, new_keys + from, bytes);
        std::memcpy(row_values + to, new_values + from, bytes);
      }
  }
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(chatapp, m) {
  m.def("decode_attention_rows(Tensor queries, Tensor table, int layer, Tensor positions, Tensor key, "
        "Tensor value, float scaling) -> Tensor");
  m.def("store_rows(Tensor table, Tensor positions, Tensor keys, Tensor values, int first_layer=0) -> ()");
}

TORCH_LIBRARY_IMPL(chatapp, CPU, m) {
  m.impl("decode_attention_rows", decode_attention_rows);
  m.impl("store_rows", store_rows);
}

extern "C" AOTITorchError aoti_torch_cpu_decode_attention_rows(AtenTensorHandle queries, AtenTensorHandle table,
                                                               int64_t layer, AtenTensorHandle positions,
                                                               AtenTensorHandle key, AtenTensorHandle value,
                                                               double scaling, AtenTensorHandle* out) {
  using chatapp_shim::tensor;
  return chatapp_shim::returning("chatapp::decode_attention_rows", out, [&] {
    return decode_attention_rows(tensor(queries), tensor(table), layer, tensor(positions), tensor(key), tensor(value),
                                 scaling);
  });
}
