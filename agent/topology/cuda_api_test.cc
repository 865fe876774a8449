// cuda_api.h declares the CUDA entry points the agent dlopen()s without the
// toolkit's headers. Here, where the toolkit is installed, each declaration is
// held against the real one: values, call signatures (argument count, and the
// size and kind of every argument and result), the symbol each header name
// links to (cuDeviceTotalMem is cuDeviceTotalMem_v2), and that the libraries
// export those symbols.
#include "agent/topology/cuda_api.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <string>
#include <type_traits>

#include "gtest/gtest.h"

namespace monta::topology::cuda_api {
namespace {

// Whether passing A where B is declared is the same at the machine level:
// pointers to the same (same-size, same-kind) thing, or integers/enums of
// the same size.
template <typename A, typename B>
constexpr bool SameAbi() {
  if constexpr (std::is_pointer_v<A> != std::is_pointer_v<B>) {
    return false;
  } else if constexpr (std::is_pointer_v<A>) {
    using PA = std::remove_pointer_t<A>;
    using PB = std::remove_pointer_t<B>;
    return std::is_const_v<PA> == std::is_const_v<PB> &&
           SameAbi<std::remove_cv_t<PA>, std::remove_cv_t<PB>>();
  } else {
    return sizeof(A) == sizeof(B) &&
           (std::is_integral_v<A> ||
            std::is_enum_v<A>)&&(std::is_integral_v<B> || std::is_enum_v<B>);
  }
}

template <typename R1, typename... A1, typename R2, typename... A2>
constexpr bool Compatible(R1 (*)(A1...), R2 (*)(A2...)) {
  if constexpr (sizeof...(A1) != sizeof...(A2)) {
    return false;
  } else {
    return SameAbi<R1, R2>() && (SameAbi<A1, A2>() && ...);
  }
}

static_assert(kCudaSuccess == cudaSuccess);
static_assert(kCudaDevAttrMultiProcessorCount ==
              cudaDevAttrMultiProcessorCount);
static_assert(kCuSuccess == CUDA_SUCCESS);
static_assert(Compatible(GetDeviceCountFn{}, &cudaGetDeviceCount));
static_assert(Compatible(DeviceGetAttributeFn{}, &cudaDeviceGetAttribute));
static_assert(Compatible(DeviceGetPciBusIdFn{}, &cudaDeviceGetPCIBusId));
static_assert(Compatible(DeviceCanAccessPeerFn{}, &cudaDeviceCanAccessPeer));
static_assert(Compatible(GetErrorStringFn{}, &cudaGetErrorString));
static_assert(Compatible(CuInitFn{}, &cuInit));
static_assert(Compatible(CuDeviceGetFn{}, &cuDeviceGet));
static_assert(Compatible(CuDeviceGetByPciBusIdFn{}, &cuDeviceGetByPCIBusId));
static_assert(Compatible(CuDeviceGetNameFn{}, &cuDeviceGetName));
static_assert(Compatible(CuDeviceTotalMemFn{}, &cuDeviceTotalMem));
static_assert(Compatible(CuGetErrorStringFn{}, &cuGetErrorString));
// The checker itself tells a wrong declaration apart.
static_assert(
    !Compatible(CuDeviceTotalMemFn{},
                static_cast<CUresult (*)(unsigned int*, CUdevice)>(nullptr)));
static_assert(!Compatible(CuInitFn{}, &cuDeviceGet));

// The symbol a header name stands for, after the header's own #defines.
#define MONTA_SYMBOL(name) MONTA_SYMBOL_TEXT(name)
#define MONTA_SYMBOL_TEXT(name) #name

TEST(CudaApi, SymbolNamesAreTheOnesTheHeadersLinkTo) {
  EXPECT_STREQ(kGetDeviceCount, MONTA_SYMBOL(cudaGetDeviceCount));
  EXPECT_STREQ(kDeviceGetAttribute, MONTA_SYMBOL(cudaDeviceGetAttribute));
  EXPECT_STREQ(kDeviceGetPciBusId, MONTA_SYMBOL(cudaDeviceGetPCIBusId));
  EXPECT_STREQ(kDeviceCanAccessPeer, MONTA_SYMBOL(cudaDeviceCanAccessPeer));
  EXPECT_STREQ(kGetErrorString, MONTA_SYMBOL(cudaGetErrorString));
  EXPECT_STREQ(kCuInit, MONTA_SYMBOL(cuInit));
  EXPECT_STREQ(kCuDeviceGet, MONTA_SYMBOL(cuDeviceGet));
  EXPECT_STREQ(kCuDeviceGetByPciBusId, MONTA_SYMBOL(cuDeviceGetByPCIBusId));
  EXPECT_STREQ(kCuDeviceGetName, MONTA_SYMBOL(cuDeviceGetName));
  EXPECT_STREQ(kCuDeviceTotalMem, MONTA_SYMBOL(cuDeviceTotalMem));
  EXPECT_STREQ(kCuGetErrorString, MONTA_SYMBOL(cuGetErrorString));
}

// Every name resolves in the toolkit's libraries: the runtime itself, and the
// driver's link stub (the real libcuda.so.1 comes with a GPU driver).
TEST(CudaApi, TheLibrariesExportEverySymbol) {
  const std::string lib64 = std::string(MONTA_CUDA_HOME) + "/lib64/";
  void* runtime = dlopen((lib64 + "libcudart.so").c_str(), RTLD_NOW);
  ASSERT_NE(runtime, nullptr) << dlerror();
  for (const char* name :
       {kGetDeviceCount, kDeviceGetAttribute, kDeviceGetPciBusId,
        kDeviceCanAccessPeer, kGetErrorString}) {
    EXPECT_NE(dlsym(runtime, name), nullptr) << name;
  }
  void* driver = dlopen((lib64 + "stubs/libcuda.so").c_str(), RTLD_NOW);
  ASSERT_NE(driver, nullptr) << dlerror();
  for (const char* name :
       {kCuInit, kCuDeviceGet, kCuDeviceGetByPciBusId, kCuDeviceGetName,
        kCuDeviceTotalMem, kCuGetErrorString}) {
    EXPECT_NE(dlsym(driver, name), nullptr) << name;
  }
  EXPECT_EQ(dlsym(driver, "cuNoSuchFunction"), nullptr);
}

}  // namespace
}  // namespace monta::topology::cuda_api
