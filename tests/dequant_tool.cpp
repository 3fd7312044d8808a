// dequant_tool TYPE < blocks > values: the fp32 values (native byte order) of
// raw blocks of a GGUF tensor type, read from stdin. For
// tests/quant_reference_test.py, which compares them with gguf's numpy
// dequantizers.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "model/ggml_types.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: dequant_tool TYPE < blocks > values\n");
    return 2;
  }
  for (uint32_t id = 0; id < 64; ++id) {
    const auto info = cs::type_info(id);
    if (!info || std::strcmp(info->name, argv[1]) != 0) continue;
    std::vector<char> in((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    if (in.size() % size_t(info->block_bytes)) {
      std::fprintf(stderr, "dequant_tool: %zu bytes are not whole %s blocks\n", in.size(), info->name);
      return 1;
    }
    std::vector<float> out(in.size() / size_t(info->block_bytes) * size_t(info->block_elems));
    cs::dequantize_row(cs::GgmlType(id), in.data(), out.data(), out.size());
    std::fwrite(out.data(), sizeof(float), out.size(), stdout);
    return 0;
  }
  std::fprintf(stderr, "dequant_tool: unsupported type %s\n", argv[1]);
  return 1;
}
