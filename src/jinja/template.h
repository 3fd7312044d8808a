// A compiled Jinja template and its render, with the semantics of jinja2's
// ImmutableSandboxedEnvironment as Hugging Face configures it for chat
// templates: trim_blocks, lstrip_blocks, loop controls, the {% generation %}
// block, the globals raise_exception(message) and strftime_now(format), and
// tojson as json.dumps(ensure_ascii=False). Methods that would change a list
// or dict (append, pop, update, ...) are refused, as the sandbox refuses them.
//
// Compiled once, rendered by any number of threads at once (a render owns
// all of its state). Every render is bounded: steps, output bytes and macro
// depth, so no template and no input can hang or exhaust the process.
#pragma once
#include <chrono>
#include <ctime>
#include <memory>
#include <optional>
#include <string_view>

#include "jinja/ast.h"
#include "jinja/error.h"
#include "jinja/value.h"

namespace cs::jinja {

struct RenderOptions {
  std::optional<std::time_t> now;  // strftime_now's clock (unset: the current local time)
  uint64_t max_steps = 20'000'000;
  size_t max_output = 32u << 20;
  int max_depth = 128;  // nested macro calls
  // A wall-clock bound as well (checked every few thousand steps): a render
  // past it fails as one past max_steps does (kLimit).
  std::optional<std::chrono::steady_clock::time_point> deadline;
  uint64_t* steps_used = nullptr;  // set to the steps the render took (also when it fails)
};

class Template {
 public:
  // Throws TemplateError{kSyntax}.
  explicit Template(std::string_view source);
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;
  ~Template();

  // The output, its bytes marked markup (from the template) or content (from
  // strings of `vars` that are content). Throws TemplateError.
  Str render(const Dict& vars, const RenderOptions& opts = {}) const;

 private:
  std::shared_ptr<const Body> body_;
};

}  // namespace cs::jinja
