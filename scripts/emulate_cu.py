#!/usr/bin/env python3
"""Rewrites a .cu file of simple kernels as C++ that runs on the CPU, for
tests/emu (a fiber per lane: tests/emu/cuda_emu.h). Each launch
`launch("what", kernel, grid, block, args...)` (base/cuda.h's) becomes the
emulator's `emu::launch(...)`, CUDA's headers go, base/cuda.h becomes the emulator's,
the one inline PTX statement (if any) becomes the call ASM_CALL, `#pragma
unroll` lines go, and the
file's namespace NS gets the suffix `_emu` (so the real kernels' symbols, in
the library, are never replaced), unless NS ends in `=`: then the kernels keep
their names and replace the library's (tests/emu's fake device).

    emulate_cu.py IN.cu OUT.inc NS [ASM_CALL]
    e.g. ... cuda_matmul_kernels.cu out.inc kernels 'mma_m16n8k32_s8(c, a0, a1, a2, a3, b0, b1)'
"""
import re
import sys

src, out, ns = sys.argv[1], sys.argv[2], sys.argv[3]
keep = ns.endswith('=')
ns = ns.rstrip('=')
emu_ns = ns if keep else ns + '_emu'
asm_call = sys.argv[4] if len(sys.argv) > 4 else None
s = open(src).read()
for h in ('cuda_runtime.h', 'cuda_fp16.h', 'cuda_bf16.h'):
    s = s.replace('#include <%s>\n' % h, '')
s = s.replace('#include "base/cuda.h"\n', '#include "emu/cuda_emu.h"\n')
s = re.sub(r'^[ \t]*#pragma unroll.*\n', '', s, flags=re.M)  # nvcc's hint; the host compiler warns
asm = re.compile(r'asm volatile\((?:.|\n)*?\);')
found = len(asm.findall(s))
if found != (1 if asm_call else 0):
    sys.exit('emulate_cu.py: %d inline PTX statements in %s, %s' % (found, src, 'one expected' if asm_call else 'none expected'))
if asm_call:
    s = asm.sub(asm_call + ';', s)
s = s.replace('namespace cs::cuda::%s {' % ns,
              'namespace cs::cuda::%s {\nusing namespace cs::emu;\n%susing cs::emu::check_launch;'
              % (emu_ns, '' if keep else 'using namespace cs::cuda::%s;\n' % ns))
s = s.replace('}  // namespace cs::cuda::%s' % ns, '}  // namespace cs::cuda::%s' % emu_ns)
launch = re.compile(r'(?<![\w:])(?:cuda::)?launch\(')
s, found = launch.subn('emu::launch(', s)
if found == 0:
    sys.exit('emulate_cu.py: no launch found in ' + src)
open(out, 'w').write('// Generated from %s by scripts/emulate_cu.py: do not edit.\n' % src + s)
