// libFuzzer: PML schemas and prompts. The first byte picks: parse a schema
// and lay it out, or parse a prompt and assemble it against a fixed schema.
// Malformed input must end in a PmlError naming a line, never a crash.
#include <cstdint>
#include <sstream>
#include <string>

#include "pml/assemble.h"

namespace {

std::vector<int32_t> words(const std::string& t, bool) {
  std::istringstream in(t);
  std::vector<int32_t> out;
  for (std::string w; in >> w;) out.push_back(int32_t(w.size()));
  return out;
}
std::pair<std::string, std::string> roles(const std::string& r) { return {"<" + r + ">", "</" + r + ">"}; }

const char* kSchema = R"(<schema name="s"> one <module name="a">two <parameter name="p" length="3"/>
  <union scaffold="x"><module name="x">three</module><module name="y"><module name="z">four</module></module></union>
  </module><user>five</user></schema>)";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const cs::pml::Layout fixed = cs::pml::lay_out(cs::pml::parse_schema(kSchema, "s"), words, roles);
  if (size == 0) return 0;
  const std::string xml(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    if (data[0] & 1) {
      const cs::pml::Layout l = cs::pml::lay_out(cs::pml::parse_schema(xml, "fuzz.xml"), words, roles);
      (void)cs::pml::describe(l);
    } else {
      (void)cs::pml::assemble(fixed, cs::pml::parse_prompt(xml, "fuzz.xml"), words, roles, "<reply>");
    }
  } catch (const cs::pml::PmlError&) {
  }
  return 0;
}
