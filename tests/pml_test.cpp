// PML: parsing every construct of the spec, the layout's position IDs
// (computed by hand with a tokenizer that makes one token per word), prompt
// assembly, and every malformed case with its own message and line.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "pml/assemble.h"
#include "pml/layout.h"

namespace cs::pml {
namespace {

// One token per whitespace-separated word: token = 1000 + the word's length,
// so tests can read counts off the text. Role markers are words too.
std::vector<int32_t> words(const std::string& t, bool) {
  std::istringstream in(t);
  std::vector<int32_t> out;
  for (std::string w; in >> w;) out.push_back(int32_t(1000 + w.size()));
  return out;
}
std::pair<std::string, std::string> roles(const std::string& r) { return {"<" + r + ">", "</" + r + ">"}; }

Layout layout_of(const std::string& xml) { return lay_out(parse_schema(xml, "test.xml"), words, roles); }

void expect_error(const std::function<void()>& f, const std::string& message) {
  try {
    f();
    ADD_FAILURE() << "no error; expected: " << message;
  } catch (const PmlError& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

TEST(Pml, WhitespaceCollapsesAtTheEndsOnly) {
  EXPECT_EQ(normalize_space("\n   Hello  world \n\t"), " Hello  world ");
  EXPECT_EQ(normalize_space("Hello"), "Hello");
  EXPECT_EQ(normalize_space("   "), " ");
  EXPECT_EQ(normalize_space(""), "");
  EXPECT_EQ(normalize_space("a\n"), "a ");
}

// Positions by hand: "one two" [0, 2); module a: "three" 2, parameter p
// [3, 6), "four" 6; union at 7: x "five six" [7, 9), y "seven" [7, 8), so it
// ends at 9; "eight" 9; 10 positions.
const char* kSchema = R"(<schema name="s">
  one two
  <module name="a">three <parameter name="p" length="3" scaffold="pp"/> four</module>
  <union scaffold="x">
    <module name="x">five six</module>
    <module name="y" cache="false">seven</module>
  </union>
  eight
</schema>)";

TEST(Pml, LayoutGivesEveryTokenItsPosition) {
  const Layout l = layout_of(kSchema);
  EXPECT_EQ(l.length, 10);
  ASSERT_EQ(l.modules.size(), 4u);
  auto mod = [&](const std::string& path) -> const ModuleLayout& {
    for (const auto& m : l.modules)
      if (m.path == path) return m;
    throw std::runtime_error("no module " + path);
  };
  EXPECT_EQ(mod("s/a").start, 2);
  EXPECT_EQ(mod("s/a").length, 5);
  EXPECT_EQ(mod("s/x").start, 7);
  EXPECT_EQ(mod("s/x").length, 2);
  EXPECT_EQ(mod("s/y").start, 7);
  EXPECT_EQ(mod("s/y").length, 1);
  EXPECT_TRUE(mod("s/x").scaffold);
  EXPECT_FALSE(mod("s/y").scaffold);
  EXPECT_FALSE(mod("s/y").cache);
  EXPECT_EQ(mod("s/x").union_id, 0);
  std::vector<std::pair<int, int>> got;  // (start, length) of every segment
  for (const Segment& s : l.segments) got.emplace_back(s.start, s.length);
  EXPECT_EQ(got, (std::vector<std::pair<int, int>>{{0, 2}, {2, 1}, {3, 3}, {6, 1}, {7, 2}, {7, 1}, {9, 1}}));
  EXPECT_EQ(l.segments[2].param, "p");
  EXPECT_EQ(l.segments[2].scaffold, "pp");
  EXPECT_EQ(l.tokens_of(0), 2 + 5 + 2 + 1 + 1);
}

TEST(Pml, RoleBlocksBecomeTemplateMarkers) {
  const Layout l = layout_of(R"(<schema name="r"><system>Be nice.</system><user>Hi <module name="m">there</module></user></schema>)");
  // <system> Be nice. </system> <user> Hi [m: there] </user>
  EXPECT_EQ(l.length, 1 + 2 + 1 + 1 + 1 + 1 + 1);
  EXPECT_EQ(l.modules[1].start, 6);
}

TEST(Pml, AssemblyTakesImportsParametersAndNewText) {
  const Layout l = layout_of(kSchema);
  const Prompt p = parse_prompt(R"(<prompt schema="s"><a p="a b"/><y/><user>go now</user></prompt>)");
  const Assembly a = assemble(l, p, words, roles, "<reply>");
  // The schema's own text, then a (three, value "a b" at 3, four), y
  // (uncached), eight; then new text after the schema's 10 positions.
  std::vector<std::tuple<Piece::Kind, int, int>> got;
  for (const Piece& x : a.pieces) got.emplace_back(x.kind, x.start, int(x.tokens.size()));
  using K = Piece::Kind;
  EXPECT_EQ(got, (std::vector<std::tuple<K, int, int>>{{K::kCached, 0, 2}, {K::kCached, 2, 1}, {K::kParameter, 3, 2},
                                                        {K::kCached, 6, 1}, {K::kUncached, 7, 1}, {K::kCached, 9, 1},
                                                        {K::kNew, 10, 1}, {K::kNew, 11, 2}, {K::kNew, 13, 1},
                                                        {K::kNew, 14, 1}}));
  EXPECT_EQ(a.tokens(), 13);
  EXPECT_EQ(a.flat().size(), 13u);
  EXPECT_EQ(a.modules, (std::vector<int>{0, 1, 3}));
  // Nothing imported: the schema's own text and the new text.
  const Assembly bare = assemble(l, parse_prompt(R"(<prompt schema="s">hello</prompt>)"), words, roles, "");
  EXPECT_EQ(bare.tokens(), 2 + 1 + 1);
}

TEST(Pml, PromptErrorsNameTheProblem) {
  const Layout l = layout_of(kSchema);
  auto assembly = [&](const std::string& xml) { return [&l, xml] { assemble(l, parse_prompt(xml, "p.xml"), words, roles, ""); }; };
  expect_error(assembly(R"(<prompt schema="other"><a/></prompt>)"), "the prompt is for schema 'other', not 's'");
  expect_error(assembly(R"(<prompt schema="s"><b/></prompt>)"), "p.xml:1:20: unknown module 'b' in s");
  expect_error(assembly(R"(<prompt schema="s"><x/><y/></prompt>)"), "'y' and 'x' are members of one union");
  expect_error(assembly(R"(<prompt schema="s"><a q="1"/></prompt>)"), "module 'a' has no parameter 'q'");
  expect_error(assembly(R"(<prompt schema="s"><a p="1 2 3 4"/></prompt>)"),
               "the value of parameter 'p' has 4 tokens, more than its length 3");
  expect_error(assembly(R"(<prompt schema="s"><a/><a/></prompt>)"), "module 'a' is imported twice");
  expect_error([] { parse_prompt(R"(<prompt><a/></prompt>)", "p.xml"); }, "<prompt> needs a 'schema' attribute");
  expect_error([] { parse_prompt(R"(<prompt schema="s"><a>text</a></prompt>)", "p.xml"); },
               "a module reference has no text of its own");
  expect_error([] { parse_prompt(R"(<prompt schema="s"><user><a/></user></prompt>)", "p.xml"); },
               "role blocks of a prompt hold new text only");
}

TEST(Pml, MalformedSchemasAreErrorsWithTheirLine) {
  struct Case {
    const char* xml;
    const char* message;
  };
  const Case cases[] = {
      {"<schema name=\"s\">\n<module name=\"a\">text\n</schema>", "test.xml:3:3: not well-formed XML: Start-end tags mismatch"},
      {"<schema name=\"s\"><module name=\"a\">if (a < b) x();</module></schema>",
       "test.xml:1:42: not well-formed XML: Could not determine tag type (a bare '<' in text must be written &lt;"},
      {"<prompt schema=\"s\"/>", "the root element is <prompt>, expected <schema>"},
      {"<schema>x</schema>", "<schema> needs a 'name' attribute"},
      {"<schema name=\"s\"><module>x</module></schema>", "<module> needs a 'name' attribute"},
      {"<schema name=\"s\"><module name=\"a\">x</module><module name=\"a\">y</module></schema>",
       "duplicate module name 'a'"},
      {"<schema name=\"s\"><module name=\"1a\">x</module></schema>", "module name '1a' is not an XML name"},
      {"<schema name=\"s\"><module name=\"a\" color=\"red\">x</module></schema>", "unknown attribute 'color'"},
      {"<schema name=\"s\"><module name=\"a\" cache=\"maybe\">x</module></schema>", "cache=\"maybe\": expected"},
      {"<schema name=\"s\"><union><module name=\"a\">x</module>stray text</union></schema>",
       "text directly inside <union>"},
      {"<schema name=\"s\"><union><parameter name=\"p\" length=\"2\"/></union></schema>",
       "<parameter> inside <union>: only <module> members are allowed"},
      {"<schema name=\"s\"><union scaffold=\"z\"><module name=\"a\">x</module></union></schema>",
       "union scaffold 'z' is not one of its members"},
      {"<schema name=\"s\"><union></union></schema>", "<union> has no <module> member"},
      {"<schema name=\"s\"><parameter name=\"p\" length=\"2\"/></schema>",
       "<parameter> must be inside a <module>, not directly under <schema>"},
      {"<schema name=\"s\"><module name=\"a\"><parameter name=\"p\" length=\"0\"/></module></schema>",
       "parameter 'p' has length \"0\": expected an integer in [1, 4096]"},
      {"<schema name=\"s\"><module name=\"a\"><parameter name=\"p\"/></module></schema>",
       "<parameter> needs a 'length' attribute"},
      {"<schema name=\"s\"><module name=\"a\"><schema name=\"t\"/></module></schema>", "<schema> cannot be nested"},
      {"<schema name=\"s\"><user><system>x</system></user></schema>", "role blocks do not nest"},
      {"<schema name=\"s\"><module name=\"a\" src=\"/etc/passwd\"/></schema>",
       "test.xml:1:18: src=\"/etc/passwd\": this schema may not read files"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.xml);
    expect_error([&] { parse_schema(c.xml, "test.xml"); }, c.message);
  }
  std::string deep = "<schema name=\"s\">";
  for (int i = 0; i < 100; ++i) deep += "<module name=\"m\">";
  for (int i = 0; i < 100; ++i) deep += "</module>";
  expect_error([&] { parse_schema(deep + "</schema>", "test.xml"); }, "elements nested more than 64 deep");
  expect_error([] { layout_of(R"(<schema name="s"><module name="a"><parameter name="p" length="1" scaffold="two words"/></module></schema>)"); },
               "parameter 'p' has a scaffold of 2 tokens, more than its length 1");
}

TEST(Pml, OtherTagsAreLiteralText) {
  const Schema s = parse_schema(R"(<schema name="s"><module name="a">Use <b>bold</b> text</module></schema>)", "t");
  const Node& a = s.root.children.at(0);
  ASSERT_EQ(a.children.size(), 3u);
  EXPECT_EQ(a.children[1].text, "<b>bold</b>");
  // CDATA holds code with bare < and &.
  const Schema c = parse_schema("<schema name=\"s\"><module name=\"a\"><![CDATA[if (a < b && c) {}]]></module></schema>", "t");
  EXPECT_EQ(c.root.children.at(0).children.at(0).text, "if (a < b && c) {}");
  // A bare '&' that starts no entity is text; a bare '<' is an error (above).
  const Schema amp = parse_schema(R"(<schema name="s"><module name="a">a && b</module></schema>)", "t");
  EXPECT_EQ(amp.root.children.at(0).children.at(0).text, "a && b");
}

// Every schema in the spec's examples parses and lays out; the prompt
// parses and assembles against its schema.
TEST(Pml, TheSpecExamplesParse) {
  for (const char* f : {"code_generation_bookstore.xml", "empty.xml", "parameterized_prompts.xml", "schema_mbti_short.xml"}) {
    SCOPED_TRACE(f);
    const Schema s = parse_schema_file(std::string(CS_PML_DIR) + "/" + f);
    const Layout l = lay_out(s, words, roles);
    EXPECT_GT(l.length, 0);
  }
  const Layout mbti = lay_out(parse_schema_file(std::string(CS_PML_DIR) + "/schema_mbti_short.xml"), words, roles);
  EXPECT_EQ(mbti.unions, 4);
  std::ifstream in(std::string(CS_PML_DIR) + "/prompt_mbti.xml");
  std::ostringstream text;
  text << in.rdbuf();
  const Assembly a = assemble(mbti, parse_prompt(text.str()), words, roles, "<reply>");
  // E, N, T and P are imported; their unions' other members are not.
  std::vector<std::string> names;
  for (int m : a.modules) names.push_back(mbti.modules[size_t(m)].name);
  EXPECT_EQ(names, (std::vector<std::string>{"mbti", "E", "N", "T", "P"}));
}

// A schema written back as PML (what saved schemas hold) parses to the same
// tree: src= files inlined, adjacent text nodes kept apart, literal tags,
// CDATA code, unions, parameters and role blocks.
bool same_tree(const Node& a, const Node& b) {
  if (a.kind != b.kind || a.text != b.text || a.name != b.name || a.cache != b.cache || a.scaffold != b.scaffold ||
      a.length != b.length || a.children.size() != b.children.size())
    return false;
  for (size_t i = 0; i < a.children.size(); ++i)
    if (!same_tree(a.children[i], b.children[i])) return false;
  return true;
}

TEST(Pml, WrittenSchemasParseToTheSameTree) {
  std::vector<Schema> schemas;
  for (const char* f : {"code_generation_bookstore.xml", "empty.xml", "parameterized_prompts.xml", "schema_mbti_short.xml"})
    schemas.push_back(parse_schema_file(std::string(CS_PML_DIR) + "/" + f));
  schemas.push_back(parse_schema(
      "<schema name=\"s\">  lead <b>bold</b> tail <![CDATA[if (a < b && c) {}]]>\n<module name=\"m\" cache=\"false\">"
      "x &amp; y<parameter name=\"p\" length=\"3\" scaffold=\"a &quot;q&quot;\"/>z</module><user>hi <union "
      "scaffold=\"b\"><module name=\"a\">A</module><module name=\"b\"> </module></union></user></schema>",
      "t.xml"));
  for (const Schema& s : schemas) {
    SCOPED_TRACE(s.name);
    const std::string xml = to_pml(s);
    const Schema back = parse_schema(xml, "written.xml");
    EXPECT_EQ(back.name, s.name);
    EXPECT_TRUE(same_tree(back.root, s.root)) << xml;
    EXPECT_EQ(to_pml(back), xml);
    const Layout a = lay_out(s, words, roles), b = lay_out(back, words, roles);
    ASSERT_EQ(a.segments.size(), b.segments.size());
    for (size_t g = 0; g < a.segments.size(); ++g) EXPECT_EQ(a.segments[g].tokens, b.segments[g].tokens);
  }
  // src= text is inlined: the written schema needs no other file.
  const std::string dir = testing::TempDir();
  std::ofstream(dir + "/inc.txt") << "def f(a, b):\n    return a < b && b > 0\n";
  const Schema inc = parse_schema("<schema name=\"i\"><module name=\"code\" src=\"inc.txt\"/></schema>", "i.xml",
                                  SrcFiles::relative_to(dir));
  const std::string xml = to_pml(inc);
  EXPECT_EQ(xml.find("src="), std::string::npos);
  EXPECT_TRUE(same_tree(parse_schema(xml, "w.xml").root, inc.root)) << xml;
}

// src= over HTTP (the default policy) reads nothing; a confined directory
// gives regular files below it and nothing else, whatever the path or the
// tree holds; the CLI's relative reading refuses devices and FIFOs.
TEST(Pml, ModuleFilesReadOnlyWhatThePolicyAllows) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(testing::TempDir()) / ("pml_src_" + std::to_string(getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "allowed" / "sub");
  std::ofstream(root / "allowed" / "a.txt") << "alpha";
  std::ofstream(root / "allowed" / "sub" / "b.txt") << "beta";
  std::ofstream(root / "secret.txt") << "secret";
  fs::create_symlink(root / "secret.txt", root / "allowed" / "link.txt");
  fs::create_directory_symlink(root, root / "allowed" / "up");
  ASSERT_EQ(mkfifo((root / "allowed" / "fifo").c_str(), 0600), 0);
  std::ofstream(root / "allowed" / "big.txt") << std::string(SrcFiles::kMaxBytes + 1, 'x');

  const SrcFiles confined = SrcFiles::confined_to((root / "allowed").string());
  auto text_of = [](const std::string& src, const SrcFiles& files) {
    const Schema s = parse_schema("<schema name=\"s\"><module name=\"m\" src=\"" + src + "\"/></schema>", "s.xml", files);
    return s.root.children.at(0).children.at(0).text;
  };
  EXPECT_EQ(text_of("a.txt", confined), "alpha");
  EXPECT_EQ(text_of("sub/b.txt", confined), "beta");
  const std::pair<std::string, std::string> refused[] = {
      {"../secret.txt", "may not hold empty, '.' or '..' components"},
      {"sub/../a.txt", "may not hold empty, '.' or '..' components"},
      {(root / "secret.txt").string(), "must be a relative path below the allowed directory"},
      {"/dev/zero", "must be a relative path below the allowed directory"},
      {"link.txt", "symbolic links are not followed"},
      {"up/secret.txt", "symbolic links are not followed"},
      {"fifo", "is not a regular file"},
      {"sub", "is not a regular file"},
      {"missing.txt", "no such file below the module file directory"},
      {"big.txt", "has 1048577 bytes, more than the 1048576 a module file may have"},
  };
  for (const auto& [src, message] : refused) {
    SCOPED_TRACE(src);
    expect_error([&] { text_of(src, confined); }, "s.xml:1:18: src=\"" + src + "\"");
    expect_error([&] { text_of(src, confined); }, message);
  }
  expect_error([&] { text_of("a.txt", SrcFiles::refuse()); }, "this schema may not read files");
  const SrcFiles relative = SrcFiles::relative_to((root / "allowed").string());
  EXPECT_EQ(text_of("sub/b.txt", relative), "beta");
  expect_error([&] { text_of("/dev/zero", relative); }, "src=\"/dev/zero\" is not a regular file");
  expect_error([&] { text_of("fifo", relative); }, "is not a regular file");
  fs::remove_all(root);
}

}  // namespace
}  // namespace cs::pml
