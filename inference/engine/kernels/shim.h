// The operators' C entry points, which the compiled decode step's generated code calls by name
// (inductor's `aot_inductor.custom_ops_to_c_shims`: own_kernels.py reads the declarations below,
// decode_graph.py hands them to inductor), each one the same kernel the dispatcher would call.
//
// Why: through torch's dispatcher (`aoti_torch_call_dispatcher`) each of a step's 151 operator
// calls looks its schema up by name, boxes its arguments into a stack of IValues, takes a new
// handle on every tensor and unboxes them again on the kernel's side. Called here, a handle is
// read as the tensor it holds and the result handed back in a new one. The profiler still sees
// each call under the operator's name (RECORD_FUNCTION: a thread-local check when none runs), so
// the step benchmark's products are what they were.
#pragma once

#include <ATen/record_function.h>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/inductor/aoti_torch/utils.h>

// The entry points, one a line: own_kernels.py reads these lines to declare them to inductor.
extern "C" {
AOTITorchError aoti_torch_cpu_dot_rows(AtenTensorHandle rows, AtenTensorHandle weight, AtenTensorHandle* out);
AOTITorchError aoti_torch_cpu_decode_attention_rows(AtenTensorHandle queries, AtenTensorHandle table, int64_t layer, AtenTensorHandle positions, AtenTensorHandle key, AtenTensorHandle value, double scaling, AtenTensorHandle* out);
}

namespace chatapp_shim {

inline const at::Tensor& tensor(AtenTensorHandle handle) {
  return *torch::aot_inductor::tensor_handle_to_tensor_pointer(handle);
}

// Runs `kernel` (returning a tensor) as the operator `name` for the profiler, its result in a new
// handle at `out`; an exception becomes an error code with its message kept, as torch's own
// shims do.
template <typename Kernel>
AOTITorchError returning(const char* name, AtenTensorHandle* out, Kernel&& kernel) {
  AOTI_TORCH_CONVERT_EXCEPTION_TO_ERROR_CODE({
    RECORD_FUNCTION(name, c10::ArrayRef<const c10::IValue>{});
    *out = torch::aot_inductor::new_tensor_handle(kernel());
  });
}

}  // namespace chatapp_shim
