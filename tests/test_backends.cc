// The kernels backends' table (core/model/backends.h): names, devices, dtypes, and the messages built from it.
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <string>

#include "core/model/backends.h"
#include "core/model/profile.h"

namespace pipescope {
namespace {

TEST(Backends, EveryKindHasOneRowAndAUniqueName) {
  std::set<std::string> names;
  for (const BackendInfo& b : backend_table()) {
    EXPECT_TRUE(names.insert(b.name).second) << b.name;
    EXPECT_EQ(&backend_info(b.kind), &b);
    EXPECT_EQ(find_backend(b.name), &b);
    EXPECT_EQ(std::string(b.dtype).empty(), b.device == BackendDevice::None) << b.name;
  }
  EXPECT_EQ(find_backend("cpu-f16"), nullptr);
  EXPECT_TRUE(backend_on("cuda-bf16", BackendDevice::Cuda));
  EXPECT_FALSE(backend_on("cpu-f64", BackendDevice::Cuda));
  EXPECT_FALSE(backend_on("nonsense", BackendDevice::Cpu));
}

TEST(Backends, MessagesListTheTable) {
  EXPECT_EQ(backend_names(), "cpu-f64, cpu-f32, cuda-bf16, cuda-f16, null");
  EXPECT_EQ(backend_names([](const BackendInfo& b) { return b.device == BackendDevice::Cuda; }), "cuda-bf16, cuda-f16");
  try {
    backend_named("gpu");
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "--backend: unknown backend 'gpu' (valid: cpu-f64, cpu-f32, cuda-bf16, cuda-f16, null)");
  }
  EXPECT_EQ(dtype_of_backend("cuda-bf16"), "bf16");
  EXPECT_EQ(dtype_of_backend("cpu-f64"), "fp64");
  EXPECT_THROW(dtype_of_backend("null"), ProfileError);  // computes nothing: no dtype to record
}

}  // namespace
}  // namespace pipescope
