// Python's buffers as commbench::Buffer (buffer.h), read while the GIL is still held (before a
// binding's call guard releases it): a NumPy array (host memory; bfloat16 from ml_dtypes) or a torch
// tensor (host or GPU). Only the object's attributes are read, so the host extension links no tensor
// library. A buffer the loops cannot take (strided, an unsupported dtype) is refused here.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "commbench/buffer.h"

namespace pybind11 {
namespace detail {

template <>
struct type_caster<commbench::Buffer> {
  PYBIND11_TYPE_CASTER(commbench::Buffer, const_name("buffer"));

  bool load(handle src, bool) {
    if (hasattr(src, "data_ptr")) return load_tensor(src);
    if (hasattr(src, "__array_interface__")) return load_array(src);
    return false;
  }

 private:
  bool load_tensor(handle t) {
    require(t.attr("is_contiguous")().cast<bool>());
    // Only host and CUDA memory: a tensor elsewhere (meta, another accelerator) has no address the
    // loops could use.
    const std::string kind = str(t.attr("device").attr("type"));
    if (kind != "cpu" && kind != "cuda")
      throw std::invalid_argument("buffers must be in host memory or on a CUDA device, not on " + kind);
    value.device = kind == "cuda" ? t.attr("get_device")().cast<int>() : commbench::kHost;
    value.data = reinterpret_cast<void*>(t.attr("data_ptr")().cast<std::uintptr_t>());
    value.count = t.attr("numel")().cast<std::size_t>();
    const std::string name = str(t.attr("dtype"));
    value.dtype = commbench::dtype_named(name.rfind("torch.", 0) == 0 ? name.substr(6) : name);
    return true;
  }

  bool load_array(handle a) {
    require(a.attr("flags")["C_CONTIGUOUS"].cast<bool>());
    // The loops write into receive buffers, and read elements of their type where they start.
    if (!a.attr("flags")["ALIGNED"].cast<bool>()) throw std::invalid_argument("buffers must be aligned to their element size");
    const tuple data = a.attr("__array_interface__")["data"].cast<tuple>();
    if (data[1].cast<bool>()) throw std::invalid_argument("buffers must be writable");
    value.data = reinterpret_cast<void*>(data[0].cast<std::uintptr_t>());
    value.count = a.attr("size").cast<std::size_t>();
    value.device = commbench::kHost;
    value.dtype = commbench::dtype_named(str(a.attr("dtype")));
    return true;
  }

  static void require(bool contiguous) {
    if (!contiguous) throw std::invalid_argument("buffers must be contiguous");
  }
};

}  // namespace detail
}  // namespace pybind11
