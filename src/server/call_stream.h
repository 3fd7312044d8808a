// Calls read from a reply as it is written, so that a stream can send each
// call as the model writes it: its name once whole, then its arguments piece
// by piece (OpenAI's tool_calls deltas, the Messages API's input_json_delta,
// the Responses API's function_call_arguments.delta), not the whole call at
// the end. In the XML formats a string parameter's value streams as it is
// written, any other value when its element closes. A reply read at once (a non-streamed answer) is read by the same
// reader in one push, so a stream and an answer never differ, whatever the
// chunks and wherever the reply stops.
//
// Only a call written under its grammar (tool_call_grammar, from the reply's
// start or from its trigger: ApiRequest::calls_constrained) is sent as it
// comes: the grammar makes a call that begins as one end as one, unless the
// reply is cut short (max_tokens, a stop sequence, a cancel), and then the
// call is sent as far as it got, marked incomplete (OpenAI: arguments cut
// short, finish_reason "length"). Unconstrained, text that may be a call is
// held and read whole at the end (parse_tool_calls), since free text that
// looks like a call may not be one.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/tool_calls.h"

namespace cs {

struct CallPiece {
  enum class Kind {
    kContent,    // text of the answer outside calls
    kCall,       // a call begins: text is the tool's name
    kArguments,  // more of the current call's arguments (JSON text, whitespace outside strings dropped)
    kEnd,        // the current call ends; complete: its arguments closed
  };
  Kind kind = Kind::kContent;
  std::string text;
  bool complete = true;
};

// A reply's text in the order written: runs of content (each trimmed at
// both ends) and calls.
struct ReplyPart {
  bool is_call = false;
  std::string text;  // !is_call
  ToolCall call;     // is_call
};

class CallStream {
 public:
  // types: the XML formats' parameter kinds (param_types; kept by the
  // caller; null: values read without them).
  CallStream(ToolFormat f, bool constrained, const ParamTypes* types = nullptr);
  // More of the reply: the pieces that can go out now. A run of content is
  // sent trimmed: whitespace at its start is dropped and at its end held
  // until more text follows it (so a stream and a whole answer agree).
  std::vector<CallPiece> push(std::string_view text);
  // The reply's end: whatever was held.
  std::vector<CallPiece> finish();

 private:
  enum class State {
    kContent, kPlain, kHead, kHeader, kBodyStart, kArgs, kTail, kHold, kXmlFunction, kXmlParams, kXmlValue, kKimiCall
  };
  ToolFormat f_;
  bool constrained_;
  const ParamTypes* types_;
  const std::map<std::string, std::string>* params_ = nullptr;  // the XML call's parameters' kinds
  std::string type_;             // kXmlValue: the value's kind
  bool first_param_ = true;      // kXmlParams: no parameter yet
  bool value_begun_ = false;     // kXmlValue: its first newline is decided
  bool in_block_ = false;        // kXmlFunction, kKimiCall: a call of this block has ended (one_block formats, Kimi's)
  State state_ = State::kContent;
  std::string buf_;   // text not yet read
  std::string head_;  // a call's text from its marker until its arguments begin (read again if it is none)
  std::string held_;  // kHold: the rest of the reply, read whole at the end
  std::string name_;  // kBodyStart: harmony's recipient
  char opener_ = 0;   // kHead: what comes before the call object ('[': Mistral's list)
  bool at_start_ = true;    // nothing but whitespace read yet (Llama 3's and Mistral's calls open the reply)
  bool run_open_ = false;   // a run of content has shown text
  std::string space_;       // whitespace at a run's end, held until text follows it
  int depth_ = 0;           // kArgs: open arrays and objects
  bool in_string_ = false, escaped_ = false;
  bool tail_brace_ = false;  // kTail: the call object's closing brace was read

  void step(std::vector<CallPiece>& out, bool end);
  void content(std::vector<CallPiece>& out, std::string_view text);
  void end_run();
  bool read_content(std::vector<CallPiece>& out, bool end);
  bool read_head(std::vector<CallPiece>& out, bool end);
  bool read_header(std::vector<CallPiece>& out, bool end);
  bool read_body_start(std::vector<CallPiece>& out, bool end);
  bool read_args(std::vector<CallPiece>& out, bool end);
  bool read_tail(std::vector<CallPiece>& out, bool end);
  bool read_xml_function(std::vector<CallPiece>& out, bool end);
  bool read_xml_params(std::vector<CallPiece>& out, bool end);
  bool read_xml_value(std::vector<CallPiece>& out, bool end);
  bool read_kimi_call(std::vector<CallPiece>& out, bool end);
  // After a call in a block that holds several: the block's close (back to
  // content) or `next` (true: the next call follows); markup the reply's end
  // cut is dropped, anything else is content.
  bool block_goes_on(std::string_view close, std::string_view next, bool end, bool* more);
  void hold(std::string_view from);
  void begin_call(std::vector<CallPiece>& out, const std::string& name);
};

// The parts a stream's pieces make, joined as a client joins them.
std::vector<ReplyPart> reply_parts(std::vector<CallPiece> pieces);
// A whole reply read as a stream of it is: its parts in order.
std::vector<ReplyPart> read_reply(std::string_view reply, ToolFormat f, bool constrained,
                                  const ParamTypes* types = nullptr);
// The same as one text and the calls: the content runs joined by newlines.
ParsedReply read_calls(std::string_view reply, ToolFormat f, bool constrained, const ParamTypes* types = nullptr);

// A call's arguments cut short (ToolCall::complete false) as an object of
// the members written whole (what a client parsing the streamed JSON as it
// came would hold); {} when none is.
nlohmann::ordered_json partial_arguments(std::string_view text);

}  // namespace cs
