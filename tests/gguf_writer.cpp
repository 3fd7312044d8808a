#include "gguf_writer.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <gtest/gtest.h>

namespace cs::test {

// Written under a temporary name and renamed into place: tests run in
// parallel processes, and one that maps the file while another rewrote it
// in place would read a truncated mapping (SIGBUS).
std::string GgufWriter::write_bytes(const std::string& name, const std::vector<uint8_t>& b) {
  const std::string path = ::testing::TempDir() + "cs_" + name + ".gguf";
  const std::string tmp = path + "." + std::to_string(getpid()) + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) std::remove(tmp.c_str());
  return path;
}

std::string GgufWriter::write(const std::string& name) const { return write_bytes(name, bytes()); }

}  // namespace cs::test
