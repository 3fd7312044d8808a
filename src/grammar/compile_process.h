// Work run in a child process under a budget, for compiles whose time and
// memory depend on what a client sent (grammar.h's budgeted compile): the
// child (fork) runs at the lowest priority (so the engine's threads go first
// on a busy machine), under an address-space limit and a CPU-time limit, dies
// with the server, and is killed when the wall-clock deadline passes or the
// caller says its client has gone. A crash inside it (the compiler's own
// recursion, say) ends the child, not the server.
//
// The child runs `work` on a copy of the process as it was at the fork: it
// may read any state the caller can see, and nothing it does comes back but
// the string it returns.
//
// Children run a few at a time, process-wide (max_children): each may take
// memory_bytes and a core, and a client could otherwise start one per
// connection, each compiling a different schema, until the machine's memory
// is gone. A call waits for a free place up to twice its wall-clock budget
// (a child that started just before may take all of its own; then the call
// is refused as busy), and the wait is not counted in the compile's.
#pragma once
#include <cstddef>
#include <functional>
#include <string>

namespace cs {

struct ProcessBudget {
  double cpu_seconds = 10;                // the child's CPU time
  double wall_seconds = 30;               // from start to answer (the child is niced)
  size_t memory_bytes = size_t(1) << 30;  // address space beyond the process's own at the fork
  std::function<bool()> cancelled;        // polled every 20 ms; true: give up (the client is gone)
  // Children at once, process-wide, that this call waits below (0:
  // default_children(memory_bytes)).
  int max_children = 0;
};

// Children at once by default: the cores this process may use, and no more
// than would take half the machine's memory at `memory_bytes` each; at least 1.
int default_children(size_t memory_bytes);

// The string `work` returns in the child. Throws GrammarError naming what
// went wrong: `work`'s own exception message; the CPU time or memory spent
// ("... within its budget of 10 s of CPU time"); cancelled; the child's crash
// (its signal); busy (GrammarFailure::kBusy: no place for a child within the
// wall budget, or the wall budget spent before the CPU budget, which only a
// loaded machine does to a niced child).
std::string run_in_child(const std::function<std::string()>& work, const ProcessBudget& budget);

// Whether the child's address space is limited (memory_bytes applies). Not in
// sanitizer builds: ASan and TSan reserve terabytes of shadow memory and map
// more as they go, so a limit of "what is mapped now plus a GiB" fails their
// own mappings (ASan then stops in a CHECK instead of reporting an
// allocation failure); the CPU and wall-clock limits still apply there.
bool address_space_limited();

// Whether work in run_in_child may start threads. Not under ThreadSanitizer,
// which ends a child of a multi-threaded process that starts one (its
// die_after_fork), before the child can answer.
bool child_may_start_threads();

}  // namespace cs
