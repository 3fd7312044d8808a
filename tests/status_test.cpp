// One status across the engine's boundary (base/error.h, engine/outcome.h)
// and the server's reading of it (server/api_error.h): the code, the message
// and the location travel apart, and each route picks its API's code.
#include <gtest/gtest.h>

#include <new>

#include "engine/outcome.h"
#include "pml/pml.h"
#include "server/api_error.h"

namespace cs {
namespace {

TEST(Status, CrossesTheEngineBoundaryWithItsCodeAndLocationApart) {
  auto o = Outcome<int>::of([]() -> int {
    throw pml::PmlError({"p.xml", 3, 7}, "the schema 't' is not registered", ErrorKind::kNotFound);
  });
  try {
    (void)std::move(o).get();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
    EXPECT_EQ(e.status().message, "the schema 't' is not registered");
    EXPECT_EQ(e.status().location, "p.xml:3:7");
    EXPECT_STREQ(e.what(), "p.xml:3:7: the schema 't' is not registered");
  }
  auto oom = Outcome<void>::of([] { throw std::bad_alloc(); });
  ASSERT_TRUE(oom.error);
  EXPECT_EQ(oom.error->code, ErrorKind::kInternal);
  EXPECT_EQ(oom.error->location, "");
  auto fine = Outcome<int>::of([] { return 7; });
  EXPECT_EQ(std::move(fine).get(), 7);
}

TEST(Status, EachRoutePicksItsApiCode) {
  const auto of = [](ErrorKind k, const std::string& thing, const std::string& invalid = "") {
    const ApiError a = api_error_of({k, "why", ""}, "p", thing, invalid);
    EXPECT_EQ(a.message, "why");
    EXPECT_EQ(a.param, "p");
    return std::to_string(a.status) + " " + a.type + " " + a.code;
  };
  EXPECT_EQ(of(ErrorKind::kNotFound, "schema"), "404 invalid_request_error schema_not_found");
  EXPECT_EQ(of(ErrorKind::kNotFound, "response"), "404 invalid_request_error response_not_found");
  EXPECT_EQ(of(ErrorKind::kExists, "schema"), "409 invalid_request_error schema_exists");
  EXPECT_EQ(of(ErrorKind::kInUse, "schema"), "409 invalid_request_error schema_in_use");
  EXPECT_EQ(of(ErrorKind::kStopped, "schema"), "503 server_error unavailable");
  EXPECT_EQ(of(ErrorKind::kNoRoom, "schema"), "400 invalid_request_error kv_memory_full");
  EXPECT_EQ(of(ErrorKind::kInternal, "schema"), "500 server_error internal_error");
  EXPECT_EQ(of(ErrorKind::kInvalid, "schema", "invalid_pml"), "400 invalid_request_error invalid_pml");
  EXPECT_EQ(of(ErrorKind::kInvalid, "schema"), "400 invalid_request_error ");
  // The message says where.
  EXPECT_EQ(api_error_of({ErrorKind::kInvalid, "bad", "a.xml:1:2"}).message, "a.xml:1:2: bad");
}

}  // namespace
}  // namespace cs
