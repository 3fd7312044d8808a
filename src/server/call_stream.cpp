#include "server/call_stream.h"

#include "base/json_depth.h"
#include "base/utf8.h"
#include "server/reasoning.h"

namespace cs {

using ojson = nlohmann::ordered_json;

namespace {

bool space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

void push_piece(std::vector<CallPiece>& out, CallPiece::Kind kind, std::string_view text, bool complete = true) {
  // Text of one kind in a row is one piece.
  if ((kind == CallPiece::Kind::kContent || kind == CallPiece::Kind::kArguments) && !out.empty() &&
      out.back().kind == kind) {
    out.back().text += text;
    return;
  }
  if (kind == CallPiece::Kind::kArguments && text.empty()) return;
  out.push_back({kind, std::string(text), complete});
}

// A call object's start, up to its arguments' opening brace:
// [opener] {"name": "NAME", "arguments"|"parameters": {
// the order tool_call_grammar's schema writes (the name first).
enum class Head { kPartial, kFail, kMatch };

Head match_head(std::string_view s, char opener, std::string* name, size_t* len) {
  size_t i = 0;
  const auto blank = [&] {
    while (i < s.size() && space(s[i])) ++i;
  };
  const auto lit = [&](char c) {
    blank();
    if (i >= s.size()) return Head::kPartial;
    if (s[i] != c) return Head::kFail;
    ++i;
    return Head::kMatch;
  };
  const auto str = [&](std::string_view* token) {
    blank();
    if (i >= s.size()) return Head::kPartial;
    if (s[i] != '"') return Head::kFail;
    bool esc = false;
    for (size_t j = i + 1; j < s.size(); ++j) {
      if (esc) esc = false;
      else if (s[j] == '\\') esc = true;
      else if (s[j] == '"') {
        *token = s.substr(i, j + 1 - i);
        i = j + 1;
        return Head::kMatch;
      }
    }
    return Head::kPartial;
  };
  Head h = Head::kMatch;
  std::string_view key, value;
  if (opener && (h = lit(opener)) != Head::kMatch) return h;
  if ((h = lit('{')) != Head::kMatch || (h = str(&key)) != Head::kMatch) return h;
  if (key != "\"name\"") return Head::kFail;
  if ((h = lit(':')) != Head::kMatch || (h = str(&value)) != Head::kMatch) return h;
  if ((h = lit(',')) != Head::kMatch || (h = str(&key)) != Head::kMatch) return h;
  if (key != "\"arguments\"" && key != "\"parameters\"") return Head::kFail;
  if ((h = lit(':')) != Head::kMatch || (h = lit('{')) != Head::kMatch) return h;
  const ojson n = ojson::parse(value, nullptr, false);
  if (!n.is_string()) return Head::kFail;
  *name = n.get<std::string>();
  *len = i;
  return Head::kMatch;
}

// Where a UTF-8 character cut at the text's end begins (text.size() when
// none is): a stream sends whole characters, as JSON text must hold.
size_t whole_chars(std::string_view text) {
  for (size_t back = 1; back <= 4 && back <= text.size(); ++back) {
    const auto c = static_cast<unsigned char>(text[text.size() - back]);
    if ((c & 0xc0) == 0x80) continue;  // a continuation byte: its lead is further back
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    return n > back ? text.size() - back : text.size();
  }
  return text.size();
}

}  // namespace

CallStream::CallStream(ToolFormat f, bool constrained, const ParamTypes* types)
    : f_(f), constrained_(constrained), types_(types) {}

std::vector<CallPiece> CallStream::push(std::string_view text) {
  std::vector<CallPiece> out;
  if (state_ == State::kHold) {
    held_ += text;
    return out;
  }
  buf_ += text;
  step(out, false);
  return out;
}

std::vector<CallPiece> CallStream::finish() {
  std::vector<CallPiece> out;
  step(out, true);
  if (state_ == State::kHold) {
    const ParsedReply p = parse_tool_calls(held_, f_, types_);
    if (p.calls.empty()) {
      content(out, held_);
    } else {
      content(out, p.content);
      for (const ToolCall& c : p.calls) {
        end_run();
        push_piece(out, CallPiece::Kind::kCall, c.name);
        push_piece(out, CallPiece::Kind::kArguments, c.arguments);
        push_piece(out, CallPiece::Kind::kEnd, "");
      }
    }
    held_.clear();
  }
  end_run();
  return out;
}

void CallStream::content(std::vector<CallPiece>& out, std::string_view text) {
  if (!run_open_)
    while (!text.empty() && space(text.front())) text.remove_prefix(1);
  if (text.empty()) return;
  size_t last = text.size();
  while (last > 0 && space(text[last - 1])) --last;
  if (last == 0) {
    space_ += text;
    return;
  }
  push_piece(out, CallPiece::Kind::kContent, space_ + std::string(text.substr(0, last)));
  space_ = std::string(text.substr(last));
  run_open_ = true;
  at_start_ = false;
}

void CallStream::end_run() {
  run_open_ = false;
  space_.clear();
}

void CallStream::hold(std::string_view from) {
  held_ = std::string(from);
  state_ = State::kHold;
  buf_.clear();
}

void CallStream::begin_call(std::vector<CallPiece>& out, const std::string& name) {
  end_run();
  at_start_ = false;
  push_piece(out, CallPiece::Kind::kCall, name);
  push_piece(out, CallPiece::Kind::kArguments, "{");
  depth_ = 1;
  in_string_ = escaped_ = false;
  state_ = State::kArgs;
}

void CallStream::step(std::vector<CallPiece>& out, bool end) {
  for (;;) {
    bool again = false;
    switch (state_) {
      case State::kContent: again = read_content(out, end); break;
      case State::kPlain:
        content(out, buf_);
        buf_.clear();
        break;
      case State::kHead: again = read_head(out, end); break;
      case State::kHeader: again = read_header(out, end); break;
      case State::kBodyStart: again = read_body_start(out, end); break;
      case State::kArgs: again = read_args(out, end); break;
      case State::kTail: again = read_tail(out, end); break;
      case State::kXmlFunction: again = read_xml_function(out, end); break;
      case State::kXmlParams: again = read_xml_params(out, end); break;
      case State::kXmlValue: again = read_xml_value(out, end); break;
      case State::kKimiCall: again = read_kimi_call(out, end); break;
      case State::kHold:
        held_ += buf_;
        buf_.clear();
        break;
    }
    if (!again) return;
  }
}

// Content up to where a call may begin. Llama 3's calls are the whole reply
// and Mistral's may open it without their marker: decided at its start.
bool CallStream::read_content(std::vector<CallPiece>& out, bool end) {
  if (at_start_ && (f_ == ToolFormat::kLlama3 || f_ == ToolFormat::kMistral)) {
    const size_t first = buf_.find_first_not_of(" \n\r\t");
    if (first == std::string::npos) {
      if (end) buf_.clear();
      return false;
    }
    const std::string_view rest = std::string_view(buf_).substr(first);
    if (f_ == ToolFormat::kLlama3) {
      if (rest.starts_with(kPythonTag) || rest.starts_with("{")) {
        at_start_ = false;
        if (!constrained_) {
          hold(buf_);
          return true;
        }
        const size_t skip = first + (rest.starts_with(kPythonTag) ? kPythonTag.size() : 0);
        head_ = buf_.substr(0, skip);
        buf_.erase(0, skip);
        state_ = State::kHead;
        opener_ = 0;
        return true;
      }
      if (kPythonTag.starts_with(rest) && !end) return false;
      at_start_ = false;
      state_ = State::kPlain;
      return true;
    }
    if (!rest.starts_with(kMistralMarker)) {
      if (kMistralMarker.starts_with(rest) && !end) return false;
      at_start_ = false;
      if (rest.starts_with("[")) {  // a list of calls without the marker: read whole
        hold(buf_);
        return true;
      }
    }
  }
  const std::string_view marker = xml_format(f_)              ? xml_tags(f_).block_open
                                  : f_ == ToolFormat::kHermes  ? kHermesOpen
                                  : f_ == ToolFormat::kMistral ? kMistralMarker
                                  : f_ == ToolFormat::kHarmony ? kHarmonyChannel
                                  : f_ == ToolFormat::kKimi    ? kKimiSection
                                                               : std::string_view();
  const size_t at = marker.empty() ? std::string::npos : buf_.find(marker);
  if (at == std::string::npos) {
    const size_t cut = end || marker.empty() ? buf_.size() : std::min(buf_.size(), marker_start(buf_, marker));
    content(out, std::string_view(buf_).substr(0, cut));
    buf_.erase(0, cut);
    return false;
  }
  content(out, std::string_view(buf_).substr(0, at));
  end_run();
  at_start_ = false;
  if (!constrained_) {
    hold(std::string_view(buf_).substr(at));
    return true;
  }
  head_ = std::string(marker);
  buf_.erase(0, at + marker.size());
  state_ = f_ == ToolFormat::kHarmony ? State::kHeader
           : f_ == ToolFormat::kKimi  ? State::kKimiCall
           : xml_format(f_)           ? State::kXmlFunction
                                      : State::kHead;
  in_block_ = false;
  opener_ = f_ == ToolFormat::kMistral ? '[' : 0;
  return true;
}

// A call object up to its arguments: the call begins there (its name
// known); anything else is read whole at the end.
bool CallStream::read_head(std::vector<CallPiece>& out, bool end) {
  std::string name;
  size_t len = 0;
  const Head h = match_head(buf_, opener_, &name, &len);
  if (h == Head::kMatch) {
    buf_.erase(0, len);
    begin_call(out, name);
    return true;
  }
  if (h == Head::kPartial && !end) return false;
  hold(head_ + buf_);
  return true;
}

// Harmony: <|channel|>commentary to=functions.NAME<|message|> (the reasoning
// split's spelling of a message to a function).
bool CallStream::read_header(std::vector<CallPiece>&, bool end) {
  const size_t msg = buf_.find(kHarmonyMessage);
  if (msg == std::string::npos) {
    if (!end) return false;
    hold(head_ + buf_);
    return true;
  }
  std::string_view to = harmony_recipient(std::string_view(buf_).substr(0, msg));
  if (to.starts_with("functions.")) to.remove_prefix(10);
  if (to.empty()) {
    hold(head_ + buf_);
    return true;
  }
  name_ = std::string(to);
  head_ += buf_.substr(0, msg + kHarmonyMessage.size());
  buf_.erase(0, msg + kHarmonyMessage.size());
  state_ = State::kBodyStart;
  return true;
}

bool CallStream::read_body_start(std::vector<CallPiece>& out, bool end) {
  const size_t first = buf_.find_first_not_of(" \n\r\t");
  if (first == std::string::npos) {
    if (!end) return false;
    hold(head_ + buf_);
    return true;
  }
  if (buf_[first] != '{') {
    hold(head_ + buf_);
    return true;
  }
  buf_.erase(0, first + 1);
  begin_call(out, name_);
  return true;
}

// The arguments as they come, whitespace outside strings dropped, until
// their object closes (or, for harmony, the message ends).
bool CallStream::read_args(std::vector<CallPiece>& out, bool end) {
  size_t limit = buf_.size();
  if (f_ == ToolFormat::kHarmony) limit = end ? buf_.find(kHarmonyCall) : marker_start(buf_, kHarmonyCall);
  limit = std::min(limit, buf_.size());
  if (!end) limit = whole_chars(std::string_view(buf_).substr(0, limit));
  std::string piece;
  bool closed = false, too_deep = false;
  size_t i = 0;
  for (; i < limit; ++i) {
    const char c = buf_[i];
    if (in_string_) {
      piece += c;
      if (escaped_) escaped_ = false;
      else if (c == '\\') escaped_ = true;
      else if (c == '"') in_string_ = false;
      continue;
    }
    if (space(c)) continue;
    if ((c == '{' || c == '[') && depth_ >= kMaxJsonNesting) {  // deeper than any request may nest
      too_deep = true;
      break;
    }
    piece += c;
    if (c == '"') in_string_ = true;
    else if (c == '{' || c == '[') ++depth_;
    else if ((c == '}' || c == ']') && --depth_ == 0) {
      closed = true;
      ++i;
      break;
    }
  }
  push_piece(out, CallPiece::Kind::kArguments, piece);
  buf_.erase(0, i);
  if (closed) {
    push_piece(out, CallPiece::Kind::kEnd, "");
    state_ = State::kTail;
    tail_brace_ = f_ == ToolFormat::kHarmony || f_ == ToolFormat::kKimi;  // their body is the arguments alone
    return true;
  }
  if (too_deep) {
    push_piece(out, CallPiece::Kind::kEnd, "", false);
    state_ = State::kPlain;
    return true;
  }
  if (f_ == ToolFormat::kHarmony && std::string_view(buf_).starts_with(kHarmonyCall)) {
    push_piece(out, CallPiece::Kind::kEnd, "", false);
    buf_.erase(0, kHarmonyCall.size());
    state_ = State::kContent;
    return true;
  }
  if (end) {
    push_piece(out, CallPiece::Kind::kEnd, "", false);
    state_ = State::kContent;
    return !buf_.empty();
  }
  return false;
}

// After the arguments: the call object's close and the format's end of a
// call (or the next call of a list). What does not fit is content.
bool CallStream::read_tail(std::vector<CallPiece>& out, bool end) {
  if (f_ == ToolFormat::kHarmony) {
    const size_t at = buf_.find(kHarmonyCall);
    if (at == std::string::npos) {
      const size_t cut = end ? buf_.size() : std::min(buf_.size(), marker_start(buf_, kHarmonyCall));
      content(out, std::string_view(buf_).substr(0, cut));
      buf_.erase(0, cut);
      return false;
    }
    content(out, std::string_view(buf_).substr(0, at));
    end_run();
    buf_.erase(0, at + kHarmonyCall.size());
    state_ = State::kContent;
    return true;
  }
  const size_t first = buf_.find_first_not_of(" \n\r\t");
  if (first == std::string::npos) {
    buf_.clear();
    return false;
  }
  buf_.erase(0, first);
  if (!tail_brace_) {
    if (buf_[0] != '}') {
      state_ = State::kContent;
      return true;
    }
    buf_.erase(0, 1);
    tail_brace_ = true;
    return true;
  }
  switch (f_) {
    case ToolFormat::kHermes:
    case ToolFormat::kQwenXml:
    case ToolFormat::kSeedXml: {
      const std::string_view close = f_ == ToolFormat::kHermes ? kHermesClose : xml_tags(f_).block_close;
      if (buf_.starts_with(close)) {
        buf_.erase(0, close.size());
      } else if (close.starts_with(buf_)) {
        if (!end) return false;
        buf_.clear();  // the block's close, cut short by the reply's end: markup, not content
      }
      state_ = State::kContent;
      return true;
    }
    case ToolFormat::kKimi:
      if (buf_.starts_with(kKimiCallEnd)) {
        buf_.erase(0, kKimiCallEnd.size());
        state_ = State::kKimiCall;
        in_block_ = true;
        return true;
      }
      if (kKimiCallEnd.starts_with(buf_)) {
        if (!end) return false;
        buf_.clear();  // the call's end, cut short by the reply's end: markup, not content
      }
      state_ = State::kContent;
      return true;
    case ToolFormat::kMistral:
    case ToolFormat::kLlama3: {
      const char next = f_ == ToolFormat::kMistral ? ',' : ';';
      if (buf_[0] == next) {
        buf_.erase(0, 1);
        head_ = std::string(1, next);
        opener_ = 0;
        state_ = State::kHead;
      } else {
        if (f_ == ToolFormat::kMistral && buf_[0] == ']') buf_.erase(0, 1);
        state_ = f_ == ToolFormat::kMistral ? State::kContent : State::kPlain;
      }
      return true;
    }
    default: break;
  }
  return false;
}

// The XML formats' name after the block's marker (Qwen's <function=NAME>,
// GLM's NAME up to a tag or a newline, the invoke family's <invoke
// name="NAME">): the call begins. In a block of the invoke family, after
// a call: the next call, or the block's close.
bool CallStream::read_xml_function(std::vector<CallPiece>& out, bool end) {
  const XmlTags& t = xml_tags(f_);
  std::string name;
  size_t used = 0;
  if (!t.name_open.empty()) {
    if (in_block_) {
      bool more = false;
      const bool again = block_goes_on(t.block_close, t.name_open, end, &more);
      if (!more) return again;
    }
    const size_t first = buf_.find_first_not_of(" \n\r\t");
    const std::string_view rest = first == std::string::npos ? std::string_view() : std::string_view(buf_).substr(first);
    const size_t close = rest.starts_with(t.name_open) ? rest.find(t.name_close, t.name_open.size()) : std::string_view::npos;
    const bool partial =
        close == std::string_view::npos && (rest.starts_with(t.name_open) || t.name_open.starts_with(rest));
    if (partial && !end) return false;
    if (close == std::string_view::npos) {
      if (in_block_) {  // a name the reply's end cut short
        buf_.clear();
        state_ = State::kContent;
        return false;
      }
      hold(head_ + buf_);
      return true;
    }
    name = std::string(rest.substr(t.name_open.size(), close - t.name_open.size()));
    used = first + close + t.name_close.size();
  } else {
    // The name ends at a tag or a newline: one the reply's end cut is no name.
    const size_t stop = buf_.find_first_of("<\n");
    if (stop == std::string::npos) {
      if (!end) return false;
      hold(head_ + buf_);
      return true;
    }
    used = stop;
    const size_t a = buf_.find_first_not_of(" \t"), b = buf_.find_last_not_of(" \t", used ? used - 1 : 0);
    if (a < used && b != std::string::npos && b >= a) name = buf_.substr(a, b + 1 - a);
  }
  if (name.empty()) {
    if (in_block_) {
      state_ = State::kContent;
      return true;
    }
    hold(head_ + buf_);
    return true;
  }
  params_ = nullptr;
  if (types_)
    if (auto it = types_->find(name); it != types_->end()) params_ = &it->second;
  buf_.erase(0, used);
  begin_call(out, name);
  state_ = State::kXmlParams;
  first_param_ = true;
  return true;
}

bool CallStream::block_goes_on(std::string_view close, std::string_view next, bool end, bool* more) {
  *more = false;
  const size_t first = buf_.find_first_not_of(" \n\r\t");
  const std::string_view rest = first == std::string::npos ? std::string_view() : std::string_view(buf_).substr(first);
  if (rest.starts_with(close)) {
    buf_.erase(0, first + close.size());
    state_ = State::kContent;
    return true;
  }
  if (rest.starts_with(next)) {
    *more = true;
    return true;
  }
  const bool partial = close.starts_with(rest) || next.starts_with(rest);  // nothing yet, too
  if (partial && !end) return false;
  state_ = State::kContent;
  if (!partial) return true;  // not the format: content
  buf_.clear();               // markup the reply's end cut short: not content
  return false;
}

// Kimi: a call's id up to its arguments' tag (the call begins, its name
// known, with the body's brace); in a section after a call, the next call
// or the section's close.
bool CallStream::read_kimi_call(std::vector<CallPiece>&, bool end) {
  if (in_block_) {
    bool more = false;
    const bool again = block_goes_on(kKimiSectionEnd, kKimiCall, end, &more);
    if (!more) return again;
    head_.clear();
  }
  const size_t first = buf_.find_first_not_of(" \n\r\t");
  const std::string_view rest = first == std::string::npos ? std::string_view() : std::string_view(buf_).substr(first);
  const size_t args = rest.starts_with(kKimiCall) ? rest.find(kKimiArguments) : std::string_view::npos;
  std::string name;
  if (args != std::string_view::npos) name = kimi_name(rest.substr(kKimiCall.size(), args - kKimiCall.size()));
  if (name.empty()) {
    const bool partial = args == std::string_view::npos && (rest.starts_with(kKimiCall) || kKimiCall.starts_with(rest));
    if (partial && !end) return false;
    if (in_block_) {  // after a call: a call the end cut short is markup; anything else content
      if (partial) buf_.clear();
      state_ = State::kContent;
      return !partial;
    }
    hold(head_ + buf_);
    return true;
  }
  const size_t used = first + args + kKimiArguments.size();
  head_ += buf_.substr(0, used);
  buf_.erase(0, used);
  name_ = std::move(name);
  state_ = State::kBodyStart;
  return true;
}

// Between parameters: the next one's key (its value begins), or the call's
// end (the arguments close).
bool CallStream::read_xml_params(std::vector<CallPiece>& out, bool end) {
  const XmlTags& t = xml_tags(f_);
  const size_t first = buf_.find_first_not_of(" \n\r\t");
  if (first == std::string::npos) {
    if (end) {
      push_piece(out, CallPiece::Kind::kEnd, "", false);
      state_ = State::kContent;
    }
    buf_.clear();
    return false;
  }
  buf_.erase(0, first);
  if (buf_.starts_with(t.call_end)) {
    buf_.erase(0, t.call_end.size());
    push_piece(out, CallPiece::Kind::kArguments, "}");
    push_piece(out, CallPiece::Kind::kEnd, "");
    // Qwen's (and Seed's) </function> is followed by the block's close; GLM's
    // call ends with it; in the invoke family's block another call may follow.
    state_ = t.one_block ? State::kXmlFunction : t.call_end != t.block_close ? State::kTail : State::kContent;
    in_block_ = t.one_block;
    tail_brace_ = true;
    return true;
  }
  bool partial = t.key_open.starts_with(buf_) || t.call_end.starts_with(buf_);
  if (buf_.starts_with(t.key_open)) {
    const size_t close = buf_.find(t.key_close, t.key_open.size());
    size_t value = close == std::string::npos ? std::string::npos : close + t.key_close.size();
    int text = -1;  // DSML: the tag says the value is text (1) or not (0)
    if (value != std::string::npos && !t.string_true.empty()) {
      const std::string_view rest = std::string_view(buf_).substr(value);
      text = rest.starts_with(t.string_true) ? 1 : rest.starts_with(t.string_false) ? 0 : -1;
      partial = text < 0 && (t.string_true.starts_with(rest) || t.string_false.starts_with(rest));
      value = text < 0 ? std::string::npos : value + (text ? t.string_true.size() : t.string_false.size());
    } else if (value != std::string::npos && !t.value_open.empty()) {  // GLM: <arg_value> after the key, a newline between or not
      const size_t v = buf_.find_first_not_of(" \n\r\t", value);
      const std::string_view rest = v == std::string::npos ? std::string_view() : std::string_view(buf_).substr(v);
      value = rest.starts_with(t.value_open) ? v + t.value_open.size() : std::string::npos;
      partial = value == std::string::npos && t.value_open.starts_with(rest);
    } else {
      partial = close == std::string::npos;
    }
    if (value != std::string::npos) {
      const std::string key = buf_.substr(t.key_open.size(), close - t.key_open.size());
      type_.clear();
      if (params_)
        if (auto it = params_->find(key); it != params_->end()) type_ = it->second;
      if (text >= 0) type_ = dsml_kind(text == 1, type_);
      push_piece(out, CallPiece::Kind::kArguments,
                 std::string(first_param_ ? "\"" : ",\"") + json_escape(key) + (type_ == "string" ? "\":\"" : "\":"));
      first_param_ = false;
      buf_.erase(0, value);
      value_begun_ = false;
      state_ = State::kXmlValue;
      return true;
    }
  }
  if (partial && !end) return false;
  push_piece(out, CallPiece::Kind::kEnd, "", false);
  if (partial) buf_.clear();  // markup the reply's end cut short: not content
  // Otherwise not the format: the call ends as far as it got, the rest is content.
  state_ = State::kContent;
  return !partial;
}

// A parameter's value up to its closing tag: a string's streamed as it
// comes (JSON-escaped; for Qwen's one newline at each end dropped, the last
// held until it is known to be the last), any other type's read whole
// (xml_value_json).
bool CallStream::read_xml_value(std::vector<CallPiece>& out, bool end) {
  const XmlTags& t = xml_tags(f_);
  if (type_ == "string" && !value_begun_) {
    if (buf_.empty() && !end) return false;
    if (t.newlines && buf_.starts_with('\n')) buf_.erase(0, 1);
    value_begun_ = true;
  }
  const size_t close = buf_.find(t.value_close);
  if (type_ != "string") {
    if (close == std::string::npos) {
      if (end) {
        push_piece(out, CallPiece::Kind::kEnd, "", false);
        buf_.clear();
        state_ = State::kContent;
      }
      return false;
    }
    push_piece(out, CallPiece::Kind::kArguments, xml_value_json(std::string_view(buf_).substr(0, close), type_, t.newlines));
    buf_.erase(0, close + t.value_close.size());
    state_ = State::kXmlParams;
    return true;
  }
  if (close != std::string::npos) {
    std::string_view value = std::string_view(buf_).substr(0, close);
    if (t.newlines && value.ends_with('\n')) value.remove_suffix(1);
    push_piece(out, CallPiece::Kind::kArguments, json_escape(value) + "\"");
    buf_.erase(0, close + t.value_close.size());
    state_ = State::kXmlParams;
    return true;
  }
  size_t cut = end ? buf_.size() : std::min(buf_.size(), marker_start(buf_, t.value_close));
  if (!end) {
    if (t.newlines && cut > 0 && buf_[cut - 1] == '\n') --cut;  // perhaps the value's last newline
    cut = whole_chars(std::string_view(buf_).substr(0, cut));
  }
  push_piece(out, CallPiece::Kind::kArguments, json_escape(std::string_view(buf_).substr(0, cut)));
  buf_.erase(0, cut);
  if (end) {
    push_piece(out, CallPiece::Kind::kEnd, "", false);
    state_ = State::kContent;
  }
  return false;
}

std::vector<ReplyPart> reply_parts(std::vector<CallPiece> pieces) {
  std::vector<ReplyPart> parts;
  for (CallPiece& p : pieces) {
    switch (p.kind) {
      case CallPiece::Kind::kContent:
        if (parts.empty() || parts.back().is_call) parts.push_back({});
        parts.back().text += p.text;
        break;
      case CallPiece::Kind::kCall:
        parts.push_back({true, "", ToolCall{std::move(p.text), "", false}});
        break;
      case CallPiece::Kind::kArguments: parts.back().call.arguments += p.text; break;
      case CallPiece::Kind::kEnd: parts.back().call.complete = p.complete; break;
    }
  }
  return parts;
}

std::vector<ReplyPart> read_reply(std::string_view reply, ToolFormat f, bool constrained, const ParamTypes* types) {
  CallStream s(f, constrained, types);
  std::vector<CallPiece> pieces = s.push(reply);
  for (CallPiece& p : s.finish()) pieces.push_back(std::move(p));
  return reply_parts(std::move(pieces));
}

ParsedReply read_calls(std::string_view reply, ToolFormat f, bool constrained, const ParamTypes* types) {
  ParsedReply r;
  for (ReplyPart& p : read_reply(reply, f, constrained, types)) {
    if (p.is_call) {
      r.calls.push_back(std::move(p.call));
    } else {
      if (!r.content.empty()) r.content += '\n';
      r.content += p.text;
    }
  }
  return r;
}

// The text up to the last place where a member (or an element) was written
// whole, with the brackets then open closed.
ojson partial_arguments(std::string_view text) {
  struct Level {
    char close;
    bool expect_key;
  };
  std::vector<Level> open;
  size_t good = 0;
  std::string good_close;
  const auto mark = [&](size_t at) {
    good = at;
    good_close.clear();
    for (auto it = open.rbegin(); it != open.rend(); ++it) good_close += it->close;
  };
  bool in_string = false, escaped = false, key = false, scalar = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') {
        in_string = false;
        if (!key) mark(i + 1);
      }
      continue;
    }
    if (space(c)) continue;
    if (scalar && (c == ',' || c == '}' || c == ']')) mark(i);
    scalar = false;
    switch (c) {
      case '{':
      case '[':
        if (int(open.size()) >= kMaxJsonNesting) return ojson::object();
        open.push_back({c == '{' ? '}' : ']', c == '{'});
        mark(i + 1);
        break;
      case '}':
      case ']':
        if (open.empty()) return ojson::object();
        open.pop_back();
        mark(i + 1);
        break;
      case '"':
        in_string = true;
        key = !open.empty() && open.back().close == '}' && open.back().expect_key;
        break;
      case ':':
        if (!open.empty()) open.back().expect_key = false;
        break;
      case ',':
        if (!open.empty() && open.back().close == '}') open.back().expect_key = true;
        break;
      default: scalar = true;
    }
  }
  const ojson j = ojson::parse(std::string(text.substr(0, good)) + good_close, nullptr, false);
  return j.is_object() ? j : ojson::object();
}

}  // namespace cs
