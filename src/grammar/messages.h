// Internal to the grammar floor: the grammar engine's error text as a
// client should read it.
#pragma once
#include <string>

namespace cs {

// The engine's message without what is only for its developers: its log
// prefix ("[12:00:00] path/file.cc:123: ") and an internal check's
// "Check failed: (...) is false: ".
std::string client_message(std::string m);

}  // namespace cs
