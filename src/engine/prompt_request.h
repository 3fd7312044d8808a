// A Prompt Cache prompt as an engine request (Prompt Cache §3.4): an assembled
// prompt's tokens at the schema's positions, its cached pieces as spans of the
// schema's pinned chunks.
#pragma once
#include "engine/request.h"
#include "pml/assemble.h"
#include "pml/encode.h"

namespace cs {

// use_cache: imported modules read from their pinned chunks at the schema's
// positions; !use_cache: the same tokens at contiguous positions, all
// computed (the quality baseline). Sampling and limits are the caller's.
Request prompt_request(const pml::EncodedSchema& e, const pml::Assembly& a, bool use_cache);

}  // namespace cs
