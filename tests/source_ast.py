"""`ast.parse` for the tests that read the app's own source.

On CPython 3.11 a collection inside `compile` can run a finalizer that parses too (an asyncio
task's "exception was never retrieved", logged with a traceback that 3.11 points with `ast`), and
the nested parse leaves the AST builder's depth count off: `SystemError: AST constructor recursion
depth mismatch` (python/cpython#106905). A finished test's leftover task is enough, so the
collector is held off while a source is parsed."""

import ast
import gc


def parse(source: str) -> ast.Module:
    held = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(source)
    finally:
        if held:
            gc.enable()
