// How the XML tool-call styles (JsonFrame::Style, grammar/grammar.h) write
// a value of a JSON schema, as xgrammar's qwen_xml_parameter rules do: the
// grammar spells DSML's string attribute by it, and the server reads values
// back by it (server/tool_calls.h, param_types). No grammar engine here, so
// that the request parsers' fuzz targets link it alone.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace cs {

// "string" for a plain string (its text alone); "text" for a constrained
// one (enum, const, pattern, format, length: its text between optional
// whitespace); else its JSON type ("" where the schema names none),
// written as JSON.
std::string xml_value_kind(const nlohmann::ordered_json& schema);

}  // namespace cs
