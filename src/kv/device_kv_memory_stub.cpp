// DeviceKvMemory in a build without CUDA: construction says so.
#include "base/error.h"
#include "kv/device_kv_memory.h"

namespace cs {
namespace {
[[noreturn]] void none() { throw Error("CUDA KV memory: this chunkserve was built without CUDA"); }
}  // namespace

DeviceKvMemory::DeviceKvMemory(KvLayout layout, int capacity) : layout_(layout), capacity_(capacity) { none(); }
void DeviceKvMemory::write_rows(int, const int32_t*, int, const float*, const float*) { none(); }
void DeviceKvMemory::write_host_rows(int, const int32_t*, int, const float*, const float*) { none(); }
void DeviceKvMemory::copy_prefix(ChunkId, ChunkId, int) { none(); }
void DeviceKvMemory::read_chunk(ChunkId, uint8_t*) const { none(); }
void DeviceKvMemory::write_chunk(ChunkId, const uint8_t*) { none(); }
void DeviceKvMemory::upload(const ChunkPool&, int) { none(); }

}  // namespace cs
