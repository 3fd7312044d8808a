#include "gguf_writer.h"

#include <fstream>
#include <gtest/gtest.h>

namespace cs::test {

std::string GgufWriter::write_bytes(const std::string& name, const std::vector<uint8_t>& b) {
  const std::string path = ::testing::TempDir() + "cs_" + name + ".gguf";
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  return path;
}

std::string GgufWriter::write(const std::string& name) const { return write_bytes(name, bytes()); }

}  // namespace cs::test
