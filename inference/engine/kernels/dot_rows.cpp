// rows [R, in] x weight [out, in] -> [R, out], float32 or bfloat16, for the few rows of a decode
// step.
//
// Each output is a dot product of a row with one contiguous row of the weight, so the weight
// streams from memory once, in order, whatever R; a tile of a few rows x a few outputs keeps its
// sums in registers and reads each weight vector once for its rows (`TileShape`). While a tile's first rows
// compute, the next tile's weights (the next in memory) are fetched into L2: with a few rows
// the arithmetic per weight is long enough that, without it, reading and computing took turns
// (16 rows: 43 against 55 ms a pass over the default model). Rows are taken in blocks that fit
// the core's L2 beside a tile's weights, so that for a long prompt chunk the rows are read from
// cache while each thread's weights come from L3. Outputs are shared among torch's own OpenMP
// threads (at::parallel_for), each thread a contiguous range.
//
// The vector width is the widest this library was compiled for (own_kernels.py picks the flags
// from the CPU): AVX2 (8 floats) or AVX-512 (16); with AVX-512 BF16, bfloat16 weights and rows
// too, 32 at a time, multiplied in pairs and summed in float32 (vdpbf16ps), rounded once at the
// end, as oneDNN's bfloat16 product does.
//
// Why not oneDNN's packed product: on an AVX2 AMD EPYC a pass over the default model's weights
// took it 25-31 ms for one row, 33 for four and 52-56 for sixteen, and this 19-23, 25 and 43
// (the machine's copy bandwidth with two threads: 20-27 GB/s); at 64 and 128 rows they are
// equal; above, torch's own product serves (at::linear), as fast as oneDNN's there. On an AVX-512
// BF16 AMD EPYC, at one row: float32 13-16 against 17-21 ms, bfloat16 7.6-8.0 against 11.5-12.2;
// but from 16 rows oneDNN's is the faster there (bfloat16 13-16 against 16-17 ms at 16 rows,
// 32 against 52-57 at 64), which `INFERENCE_MATRICES=auto` weighs when it chooses (matrices.py).
#include <torch/library.h>
#include "shim.h"
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>

#include <atomic>
#include <optional>

#include "dot_tiles.h"

namespace {

using namespace chatapp_dot;

template <typename T, int R, int B>
void multiply(const at::Tensor& rows, const at::Tensor& weight, at::Tensor& product) {
  const int64_t count = rows.size(0), width = rows.size(1), outputs = weight.size(0);
  const T* x = rows.const_data_ptr<T>();
  const T* w = weight.const_data_ptr<T>();
  T* y = product.mutable_data_ptr<T>();
  at::parallel_for(0, outputs / B, 16, [&](int64_t begin, int64_t end) {
    tiles<T, R, B>(x, count, width, w, y, outputs, begin, end);
  });
  last_columns<T>(x, count, width, w, y, outputs, outputs / B * B);
}

template <typename T>
void multiply(const at::Tensor& rows, const at::Tensor& weight, at::Tensor& product) {
  if (rows.size(0) <= kFewRows) multiply<T, kFew.rows, kFew.outputs>(rows, weight, product);
  else multiply<T, kMany.rows, kMany.outputs>(rows, weight, product);
}

// The most rows ours multiplies at each precision; more go to at::linear. kMost*Rows until the
// loader measures the two on this machine's own matrices (matrices.py, `choose_dot_row_limit`):
// where torch's arithmetic is the faster (an Intel Xeon's oneMKL at float32, its AMX at
// bfloat16) the crossing comes at a few dozen rows, on an AMD EPYC at hundreds.
std::atomic<int64_t> most_float_rows{kMostFloatRows};
std::atomic<int64_t> most_bfloat16_rows{kMostBFloat16Rows};

std::atomic<int64_t>& most_rows_of(at::ScalarType dtype) {
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kBFloat16, "dot_rows: float32 or bfloat16");
  return dtype == at::kFloat ? most_float_rows : most_bfloat16_rows;
}

int64_t dot_rows_limit(at::ScalarType dtype, std::optional<int64_t> rows) {
  std::atomic<int64_t>& most = most_rows_of(dtype);
  if (rows.has_value()) {
    TORCH_CHECK(*rows >= 0, "dot_rows_limit: rows must not be negative");
    most.store(*rows);
  }
  return most.load();
}

at::Tensor dot_rows(const at::Tensor& rows_in, const at::Tensor& weight) {
  TORCH_CHECK(rows_in.dim() == 2 && weight.dim() == 2 && rows_in.size(1) == weight.size(1),
              "dot_rows: rows [R, in] and weight [out, in]");
  const at::ScalarType dtype = weight.scalar_type();
  TORCH_CHECK(rows_in.scalar_type() == dtype && (dtype == at::kFloat || (kBFloat16 && dtype == at::kBFloat16)),
              "dot_rows: rows and weight both float32", kBFloat16 ? " or both bfloat16" : "");
  TORCH_CHECK(weight.is_contiguous(), "dot_rows: the weight must be contiguous");
  if (rows_in.size(0) > most_rows_of(dtype).load(std::memory_order_relaxed)) {
    return at::linear(rows_in, weight);
  }
  const at::Tensor rows = rows_in.contiguous();
  // Allocated directly, not through the dispatcher (at::empty): 121 products a step.
  at::Tensor product = at::detail::empty_cpu({rows.size(0), weight.size(0)}, dtype);
  if (dtype == at::kFloat) {
    multiply<float>(rows, weight, product);
  } else {
#if defined(__AVX512BF16__)
    multiply<c10::BFloat16>(rows, weight, product);
#endif
  }
  return product;
}

}  // namespace

TORCH_LIBRARY(chatapp, m) {
  m.def("dot_rows(Tensor rows, Tensor weight) -> Tensor");
  // The most rows dot_rows multiplies itself at `dtype`: set where `rows` is given; the limit.
  m.def("dot_rows_limit(ScalarType dtype, int? rows=None) -> int", dot_rows_limit);
}

TORCH_LIBRARY_IMPL(chatapp, CPU, m) {
  m.impl("dot_rows", dot_rows);
}

extern "C" AOTITorchError aoti_torch_cpu_dot_rows(AtenTensorHandle rows, AtenTensorHandle weight, AtenTensorHandle* out) {
  using chatapp_shim::tensor;
  return chatapp_shim::returning("chatapp::dot_rows", out, [&] { return dot_rows(tensor(rows), tensor(weight)); });
}
