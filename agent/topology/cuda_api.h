// The CUDA runtime and driver entry points the agent dlopen()s, declared here
// from the public CUDA Runtime and Driver API references so that the agent
// builds and runs without the toolkit. Only scalar and string arguments: no
// struct whose layout could change between CUDA versions is read.
// cuda_api_test checks every declaration against the toolkit's own headers
// and libraries where one is installed.
#ifndef MONTA_AGENT_TOPOLOGY_CUDA_API_H_
#define MONTA_AGENT_TOPOLOGY_CUDA_API_H_

#include <cstddef>

namespace monta::topology::cuda_api {

// libcudart: the runtime, which counts devices and answers attributes.
using cudaError_t = int;  // enum cudaError
constexpr cudaError_t kCudaSuccess = 0;
// cudaDeviceAttr values.
constexpr int kCudaDevAttrMultiProcessorCount = 16;

using GetDeviceCountFn = cudaError_t (*)(int* count);
using DeviceGetAttributeFn = cudaError_t (*)(int* value, int attr, int device);
using DeviceGetPciBusIdFn = cudaError_t (*)(char* pci_bus_id, int len,
                                            int device);
using DeviceCanAccessPeerFn = cudaError_t (*)(int* can_access, int device,
                                              int peer_device);
using GetErrorStringFn = const char* (*)(cudaError_t error);

constexpr const char* kGetDeviceCount = "cudaGetDeviceCount";
constexpr const char* kDeviceGetAttribute = "cudaDeviceGetAttribute";
constexpr const char* kDeviceGetPciBusId = "cudaDeviceGetPCIBusId";
constexpr const char* kDeviceCanAccessPeer = "cudaDeviceCanAccessPeer";
constexpr const char* kGetErrorString = "cudaGetErrorString";

// libcuda: the driver, for what no device attribute gives (name, memory).
using CUresult = int;  // enum cudaError_enum
using CUdevice = int;
constexpr CUresult kCuSuccess = 0;

using CuInitFn = CUresult (*)(unsigned int flags);
using CuDeviceGetFn = CUresult (*)(CUdevice* device, int ordinal);
using CuDeviceGetByPciBusIdFn = CUresult (*)(CUdevice* device,
                                             const char* pci_bus_id);
using CuDeviceGetNameFn = CUresult (*)(char* name, int len, CUdevice device);
using CuDeviceTotalMemFn = CUresult (*)(size_t* bytes, CUdevice device);
using CuGetErrorStringFn = CUresult (*)(CUresult error, const char** text);

constexpr const char* kCuInit = "cuInit";
constexpr const char* kCuDeviceGet = "cuDeviceGet";
constexpr const char* kCuDeviceGetByPciBusId = "cuDeviceGetByPCIBusId";
constexpr const char* kCuDeviceGetName = "cuDeviceGetName";
// cuda.h maps cuDeviceTotalMem to its size_t version, cuDeviceTotalMem_v2.
constexpr const char* kCuDeviceTotalMem = "cuDeviceTotalMem_v2";
constexpr const char* kCuGetErrorString = "cuGetErrorString";

// cuDeviceGetName's buffer: names are far shorter (cudaDeviceProp::name is
// char[256]).
constexpr int kNameBytes = 256;

}  // namespace monta::topology::cuda_api

#endif  // MONTA_AGENT_TOPOLOGY_CUDA_API_H_
