#!/usr/bin/env python3
"""Rewrites a .cu file of simple kernels as C++ that runs on the CPU, for
tests/emu (a thread per lane: tests/emu/cuda_emu.h). Each launch
`kernel<<<grid, block>>>(args);` becomes `emu_launch(grid, block, [&] {
kernel(args); });`, the CUDA runtime header goes, base/cuda.h becomes the
emulator's, and the file's namespace NS gets the suffix `_emu` (so the real
kernels' symbols, in the library, are never replaced).

    emulate_cu.py IN.cu OUT.inc NS      e.g. ... cuda_ops_kernels.cu out.inc ops
"""
import re
import sys

src, out, ns = sys.argv[1], sys.argv[2], sys.argv[3]
s = open(src).read()
s = s.replace('#include <cuda_runtime.h>\n', '').replace('#include "base/cuda.h"\n', '#include "emu/cuda_emu.h"\n')
s = s.replace('namespace cs::cuda::%s {' % ns,
              'namespace cs::cuda::%s_emu {\nusing namespace cs::emu;\nusing cs::emu::check_launch;' % ns)
s = s.replace('}  // namespace cs::cuda::%s' % ns, '}  // namespace cs::cuda::%s_emu' % ns)
launch = re.compile(r'([\w:]+(?:<\w+>)?)<<<([^,]+), ([^>]+)>>>\(')
parts, at = [], 0
while True:
    m = launch.search(s, at)
    if not m:
        parts.append(s[at:])
        break
    end = s.index(');', m.end())
    parts.append(s[at:m.start()])
    parts.append('emu_launch(%s, %s, [&] { %s(%s); });' % (m.group(2), m.group(3), m.group(1), s[m.end():end]))
    at = end + 2
if len(parts) == 1:
    sys.exit('emulate_cu.py: no launch found in ' + src)
open(out, 'w').write('// Generated from %s by scripts/emulate_cu.py: do not edit.\n' % src + ''.join(parts))
