#!/usr/bin/env python3
"""Rewrites a .cu file of kernels as C++ that runs on the CPU, for tests/emu
(a fiber per lane: tests/emu/cuda_emu.h). Each launch
`launch("what", kernel, grid, block, args...)` or `launch_ex(...)`
(base/cuda.h's) becomes the emulator's, CUDA's headers go, `#pragma unroll`
lines go, `extern __shared__` arrays become the launch's dynamic shared
memory, and each inline PTX statement becomes the emulator's call given for
its instruction (PTX=CALL: the statement whose PTX text starts with PTX; every
statement needs one, and every one given must be used). A `#include "X.inc"`
of a file under src/ is copied in first, so the PTX of device steps that
kernels files share (base/cp_async.inc) is rewritten with the file's own.

NS names the file's namespace:
  NS      (cs::cuda::NS) gets the suffix `_emu`, so the real kernels' symbols,
          in the library, are never replaced (base/cuda.h becomes the
          emulator's header);
  NS=     keeps its name, so the kernels replace the library's (tests/emu's
          fake device; base/cuda.h likewise becomes the emulator's);
  .       a file of kernels and host code in namespace cs (attention, KV
          memory): base/cuda.h stays (the fake device implements it) and the
          emulator's names come in beside it; the file's symbols replace the
          library's.

    emulate_cu.py IN.cu OUT.inc NS [PTX=CALL ...]
    e.g. ... cuda_matmul_kernels.cu out.inc kernels 'mma.sync=mma_m16n8k32_s8(c, a0, a1, a2, a3, b0, b1)'
"""
import re
import sys

src, out, ns = sys.argv[1], sys.argv[2], sys.argv[3]
calls = []
for a in sys.argv[4:]:
    ptx, sep, call = a.partition('=')
    if not sep:
        sys.exit('emulate_cu.py: %r is not PTX=CALL' % a)
    calls.append((ptx, call))
calls.sort(key=lambda c: -len(c[0]))  # the longest PTX prefix that fits wins
whole_file = ns == '.'
keep = ns.endswith('=')
ns = ns.rstrip('=')
emu_ns = ns if keep else ns + '_emu'
s = open(src).read()
src_root = src[:src.rindex('/src/') + len('/src/')]
s = re.sub(r'^#include "([\w/]+\.inc)"\n', lambda m: open(src_root + m.group(1)).read(), s, flags=re.M)
for h in ('cuda_runtime.h', 'cuda_fp16.h', 'cuda_bf16.h'):
    s = s.replace('#include <%s>\n' % h, '')
if whole_file:
    s = s.replace('#include "base/cuda.h"\n', '#include "base/cuda.h"\n#include "emu/cuda_emu.h"\n')
    last = list(re.finditer(r'^#include .*\n', s, flags=re.M))[-1]
    s = s[:last.end()] + 'using namespace cs::emu;\n' + s[last.end():]
else:
    s = s.replace('#include "base/cuda.h"\n', '#include "emu/cuda_emu.h"\n')
s = re.sub(r'^[ \t]*#pragma unroll.*\n', '', s, flags=re.M)  # nvcc's hint; the host compiler warns
s = re.sub(r'extern __shared__ (?:__align__\(\d+\) )?(\w+) (\w+)\[\];',
           r'\1* const \2 = reinterpret_cast<\1*>(cs::emu::dynamic_smem());', s)

used = set()


def emulated(m):
    text = re.search(r'"((?:[^"\\]|\\.)*)"', m.group(0)).group(1).strip()
    for ptx, call in calls:
        if text.startswith(ptx):
            used.add(ptx)
            return call + ';'
    sys.exit('emulate_cu.py: no emulation given for the PTX %r in %s' % (text, src))


s = re.sub(r'asm(?:\s+volatile)?\s*\((?:.|\n)*?\);', emulated, s)
unused = [p for p, _ in calls if p not in used]
if unused:
    sys.exit('emulate_cu.py: no PTX in %s starts with %s' % (src, ', '.join(map(repr, unused))))
if not whole_file:
    s = s.replace('namespace cs::cuda::%s {' % ns,
                  'namespace cs::cuda::%s {\nusing namespace cs::emu;\n%susing cs::emu::check_launch;'
                  % (emu_ns, '' if keep else 'using namespace cs::cuda::%s;\n' % ns))
    s = s.replace('}  // namespace cs::cuda::%s' % ns, '}  // namespace cs::cuda::%s' % emu_ns)
launch = re.compile(r'(?<![\w:])(?:cuda::)?launch(_ex)?\(')
s, found = launch.subn(lambda m: 'emu::launch%s(' % (m.group(1) or ''), s)
if found == 0:
    sys.exit('emulate_cu.py: no launch found in ' + src)
open(out, 'w').write('// Generated from %s by scripts/emulate_cu.py: do not edit.\n' % src + s)
