"""Command line for people who write kernels.

    python -m qwengpu asm qwengpu/kernels/vadd.cu --args 0,16,32,16 --threads 16
    python -m qwengpu asm qwengpu/kernels/idioms.cu --kernel saxpy --args 0,32,3,13 --threads 4 --blocks 2
    python -m qwengpu trace qwengpu/kernels/vadd.cu --kernel vadd --args 0,16,32,4 --threads 4
    python -m qwengpu asm my_kernel.cu --kernel reverse --args 0,8 --threads 8 --shared 32   # extern __shared__
    python -m qwengpu asm qwengpu/kernels/idioms.cu --kernel matrix_add --args 0,40,80,5,7 --threads 4x2 --blocks 2x3
    python -m qwengpu asm qwengpu/kernels/floats.cu --kernel clamp --args 0,16,-1.5,2.0 --threads 16

``asm`` prints each kernel's machine blocks (registers and ROM use) for a launch configuration; without --args every
argument is 0 (pointers at word 0). ``trace`` runs one launch on the interpreter and prints its records.
"""
from __future__ import annotations

import argparse
import math
import sys

from . import tokens as T
from .device import MAX_BLOCKS, Device, dim3, launch_geometry
from .isa import LANES, REGISTERS, ROM_BLOCKS, MachineError
from .ptx import parse
from .toolchain import ptx_for


def _arguments(text: str | None, params: list) -> list:
    """--args: ints (pointers are word addresses), numbers with a point or an exponent for float parameters, and for
    a struct passed by value an int read as its little-endian bytes. Without --args every argument is 0."""
    values = [0] * len(params) if not text else [_number(v) for v in text.split(",")]
    return [v.to_bytes(p.size, "little") if p.size is not None and isinstance(v, int) and v >= 0 else v
            for v, p in zip(values, params)] + values[len(params):]


def _number(text: str):
    for read in (lambda t: int(t, 0), float):
        try:
            return read(text)
        except ValueError:
            pass
    raise MachineError(f"--args: {text.strip()!r} is not a number (ints, pointers as word addresses, or floats)")


def _dims(text: str) -> tuple[int, ...]:
    """--threads / --blocks: CUDA's dim3 as 8, 8x2 or 8x2x2."""
    try:
        return tuple(int(v) for v in text.lower().split("x"))
    except ValueError:
        raise MachineError(f"{text!r} is not a size: give 8, or 8x2 / 8x2x2 (CUDA's dim3)") from None


def asm(args) -> int:
    module = parse(open(args.file).read() if args.file.endswith(".ptx") else ptx_for(args.file), strict=False)
    names = [args.kernel] if args.kernel else sorted(module.kernels) + sorted(module.refused)
    device = Device()
    for name in names:
        kernel = device.load_kernel(args.file, name)
        values = _arguments(args.args, kernel.ptx.params)
        shape, grid = dim3(_dims(args.threads)), dim3(_dims(args.blocks), "blocks", MAX_BLOCKS)
        program = kernel.program(kernel.arguments(values), math.prod(shape), 0, math.prod(grid), args.shared,
                                 **launch_geometry(shape, grid))
        stores = sum(block.stores for block in program.blocks)
        shown = ", ".join(f"0x{v.hex()}" if isinstance(v, bytes) else str(v) for v in values)
        rom = f"{len(program.blocks)}/{ROM_BLOCKS} ROM blocks"
        if program.overlays:        # longer than the ROM: qwengpu.lowering.overlays
            rom = (f"{len(program.blocks)} blocks in {len(program.overlays)} overlays of "
                   f"{'+'.join(str(count) for _, count in program.overlays)} (the ROM holds {ROM_BLOCKS})")
        print(f"{name}({', '.join(p.name for p in kernel.ptx.params)}) args=[{shown}] threads={args.threads} "
              f"blocks={args.blocks}: {rom}, {program.registers}/{REGISTERS} "
              f"registers; a record costs {1 + 2 * LANES} model tokens + 3 per lane that stores "
              f"({stores} of the blocks store); `trace` counts a launch's records")
        for line in program.listing:
            print("  " + line)
    return 0


def trace(args) -> int:
    device = Device()
    kernel = device.load_kernel(args.file, args.kernel)
    values = _arguments(args.args, kernel.ptx.params)
    threads, blocks = _dims(args.threads), _dims(args.blocks)
    for block in range(math.prod(blocks)):
        start = len(device.tokens)
        device.start(kernel, threads, values, block=block, blocks=blocks, shared=args.shared)
        print(" ".join(str(t) for t in device.tokens[start:]))
        while device.busy:
            record = device.step()
            body = " ".join(T.name(t.id) for t in record.tokens)
            print(f"b{record.block:<2} values={record.values} stores={record.stores}  | {body}")
    print(f"stats: {device.stats} (records the model wrote, tokens it wrote: the cost)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m qwengpu", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, fn in (("asm", asm), ("trace", trace)):
        p = sub.add_parser(name)
        p.add_argument("file", help="a .cu or .ptx file")
        p.add_argument("--kernel", required=name == "trace", help="kernel name (asm: all kernels when omitted)")
        p.add_argument("--args", help="comma-separated launch arguments (ints, pointers as word addresses; floats for "
                       "float parameters)")
        p.add_argument("--threads", default="4", help="threads per block: 8, or 8x2 / 8x2x2 (CUDA's dim3)")
        p.add_argument("--blocks", default="1", help="blocks in the grid (run one after another): 2, or 2x3 / 2x3x2")
        p.add_argument("--shared", type=int, default=0,
                       help="bytes of dynamic shared memory for extern __shared__ arrays (CUDA's third launch parameter)")
        p.set_defaults(run=fn)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except MachineError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
