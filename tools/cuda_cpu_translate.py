#!/usr/bin/env python3
"""tools/cuda_cpu_translate.py — lets the host C++ compiler build CUDA source as written (the cpu flavor).

Two pieces of CUDA syntax have no C++ spelling, so before g++ sees a .cu file this rewrites them:

    kernel<<<grid, block, shared_bytes, stream>>>(args...);
        -> a call of the CPU backend's launch (common/cpu_backend/runtime.h, "Launches written as <<<>>>"),
           with the kernel's name, the file and the line of the launch;
    extern __shared__ float tile[];
        -> float (&tile)[] = ...the block's dynamic shared memory...;

and one cast the backend cannot see through: cudaLaunchKernel((void *)kernel, ...) and cudaLaunchCooperativeKernel
lose the `(void *)`, so that runtime.h's overloads get the kernel's type (which its argument array needs).

Everything else is left byte for byte, and every line stays on its line: each translated file starts with
`#line 1 "<original path>"`, so compiler messages, __FILE__/__LINE__, the backend's fault reports and gdb
breakpoints all name the original .cu file and line. The translation is plain text you can read: the cpu flavor
writes it under build/cpu/cuda_cpu_translated/<the original's absolute path>.

The files translated are the source file and every file it includes with #include "..." or <...> that is found
outside the system's and the CUDA toolkit's directories, recursively (their #include lines are pointed at the
translated copies). Comments, string and character literals are skipped, so a `<<<` there is left alone; so is
`operator<<<`.

Used three ways:
  - as the cpu flavor's compiler launcher for .cu files (CMake: RULE_LAUNCH_COMPILE), see --launcher below;
  - by tools/nvcc-cpu, the nvcc-like driver for any .cu file;
  - on its own: `cuda_cpu_translate.py FILE.cu` prints FILE.cu translated (its includes are not followed).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

LAUNCH_OPEN = "<<<"
LAUNCH_CLOSE = ">>>"
KEYWORDS_BEFORE_EXPRESSION = {
    "return", "if", "else", "while", "for", "do", "case", "switch", "throw", "co_return", "co_await", "new",
    "delete", "sizeof", "typeid", "not", "and", "or",
}


class TranslationError(Exception):
    """A <<<>>> launch or extern __shared__ declaration the translator cannot read; the message names the line."""


CODE, LITERAL, COMMENT = 0, 1, 2


def code_mask(text: str) -> list[bool]:
    """True for each character that is code: not in a comment, a string literal or a character literal."""
    return [kind == CODE for kind in character_kinds(text)]


def character_kinds(text: str) -> list[int]:
    """CODE, LITERAL (string or character literal) or COMMENT for each character of text."""
    mask = [CODE] * len(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "/" and text.startswith("//", i):
            end = i
            while end < n and text[end] != "\n":
                end += 2 if text.startswith("\\\n", end) else 1
            for k in range(i, end):
                mask[k] = COMMENT
            i = end
        elif c == "/" and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            for k in range(i, end):
                mask[k] = COMMENT
            i = end
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")
                                                         or text[i - 1] in "uUL8"):
            open_paren = text.find("(", i + 2)
            delimiter = text[i + 2:open_paren] if open_paren >= 0 else ""
            end = text.find(")" + delimiter + '"', open_paren + 1) if open_paren >= 0 else -1
            end = n if end < 0 else end + len(delimiter) + 2
            for k in range(i, end):
                mask[k] = LITERAL
            i = end
        elif c in "\"'":
            # A ' between digits is a digit separator (1'000'000), not a character literal.
            if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum():
                i += 1
                continue
            end = i + 1
            while end < n and text[end] != c and text[end] != "\n":
                end += 2 if text[end] == "\\" else 1
            end = min(end + 1, n)
            for k in range(i, end):
                mask[k] = LITERAL
            i = end
        else:
            i += 1
    return mask


def line_of(text: str, position: int) -> int:
    return text.count("\n", 0, position) + 1


def skip_space_back(text: str, mask: list[bool], i: int) -> int:
    """Index of the last code character at or before i that is not white space (-1 if none)."""
    while i >= 0 and (not mask[i] or text[i].isspace()):
        i -= 1
    return i


def skip_space_forward(text: str, mask: list[bool], i: int) -> int:
    while i < len(text) and (not mask[i] or text[i].isspace()):
        i += 1
    return i


def match_back(text: str, mask: list[bool], close: int) -> int:
    """Index of the bracket that opens the one at `close` ( ) ] or > ), scanning backwards over nested ones."""
    pairs = {")": "(", "]": "[", ">": "<", "}": "{"}
    stack = [text[close]]
    i = close - 1
    while i >= 0:
        if mask[i]:
            c = text[i]
            if c in ")]}" or (c == ">" and stack[-1] == ">" and text[i - 1:i + 1] != "->"):
                stack.append(c)
            elif c in "([{" or (c == "<" and stack[-1] == ">"):
                if pairs[stack[-1]] != c:
                    if c == "<":  # a less-than inside parentheses: not ours
                        i -= 1
                        continue
                    return -1
                stack.pop()
                if not stack:
                    return i
        i -= 1
    return -1


def match_forward(text: str, mask: list[bool], open_: int) -> int:
    """Index of the bracket closing the ( [ or { at `open_`."""
    depth = 0
    for i in range(open_, len(text)):
        if not mask[i]:
            continue
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return i
    return -1


IDENTIFIER_CHAR = re.compile(r"[A-Za-z0-9_]")


def kernel_expression_start(text: str, mask: list[bool], end: int) -> int:
    """Where the kernel expression ending at `end` (the character before <<<) starts: a name, qualified
    (ns::kernel), with template arguments (kernel<T, 4>), an element of a table (kernels[i]), (*pointer), or a call
    returning the kernel (pick_kernel(n))."""
    i = skip_space_back(text, mask, end)
    start = -1
    first = True
    while i >= 0:
        c = text[i]
        if c in ")]" and (first or c == "]" or text[i] == ")"):
            opening = match_back(text, mask, i)
            if opening < 0:
                return -1
            before = skip_space_back(text, mask, opening - 1)
            word = re.search(r"[A-Za-z_]\w*$", text[:before + 1]) if before >= 0 else None
            if c == ")" and not first and not (word and word.end() == before + 1):
                break  # a parenthesised group before the kernel, such as if (...)
            if word and word.end() == before + 1 and word.group(0) in KEYWORDS_BEFORE_EXPRESSION:
                if first:
                    start = opening
                break
            start = opening
            first = False
            i = before
            if c == ")" and not (word and word.end() == before + 1) and text[before:before + 1] not in ("]", ")"):
                break
            continue
        first = False
        if c == ">" and text[i - 1:i + 1] != "->":
            opening = match_back(text, mask, i)
            if opening < 0:
                return -1
            start = opening
            i = skip_space_back(text, mask, opening - 1)  # template arguments: a name comes before them
            continue
        if IDENTIFIER_CHAR.match(c):
            j = i
            while j > 0 and IDENTIFIER_CHAR.match(text[j - 1]) and mask[j - 1]:
                j -= 1
            word = text[j:i + 1]
            if word in KEYWORDS_BEFORE_EXPRESSION:
                break
            start = j
            i = skip_space_back(text, mask, j - 1)
            if i >= 1 and text[i - 1:i + 1] in ("::", "->"):
                if text[i - 1:i + 1] == "::":
                    before = skip_space_back(text, mask, i - 2)
                    word = re.search(r"[A-Za-z_]\w*$", text[:before + 1]) if before >= 0 else None
                    if before < 0 or not (IDENTIFIER_CHAR.match(text[before]) or text[before] == ">") or (
                            word and word.end() == before + 1 and word.group(0) in KEYWORDS_BEFORE_EXPRESSION):
                        start = i - 1  # ::kernel, the global namespace's
                        break
                i = skip_space_back(text, mask, i - 2)
                continue
            if i >= 0 and text[i] == "." :
                i = skip_space_back(text, mask, i - 1)
                continue
            break
        break
    return start


def flatten(text: str, begin: int, end: int) -> str:
    """text[begin:end] on one line: comments dropped, line breaks (and backslash-newlines) made spaces."""
    kinds = character_kinds(text[begin:end])
    kept = "".join(" " if kind == COMMENT else c for c, kind in zip(text[begin:end], kinds))
    joined = kept.replace("\\\n", " ").replace("\n", " ")
    return re.sub(r"[ \t]+", " ", joined).strip()


def launch_replacement(kernel: str, config: str, arguments_original: str, arguments_flat: str) -> str:
    """The C++ a launch becomes. The arguments are written twice (a kernel named by a single function or pointer,
    then an overloaded or template kernel whose arguments deduce its template parameters, as a call would): the
    compiler keeps one, so they are evaluated once, as in CUDA. The first copy keeps the original line breaks."""
    kernel_flat = re.sub(r"\s+", " ", kernel).strip()
    name = kernel_flat.replace("\\", "\\\\").replace('"', '\\"')
    comma_original = ", " if arguments_original.strip() else ""
    comma_flat = ", " if arguments_flat.strip() else ""
    single = f"::cpu_backend::single_kernel<decltype(cuda_cpu_tag_)>({kernel_flat})"
    # Case 1 needs the arguments to convert to the single kernel's parameters: a kernel with default arguments that
    # the launch leaves out is called instead (case 3), with its address kept for its static __shared__.
    return (
        f"::cpu_backend::launch_from_source(::cpu_backend::LaunchSite{{__FILE__, __LINE__, __func__, \"{name}\"}}, "
        f"::cpu_backend::LaunchConfig({config}), [&](auto cuda_cpu_tag_) {{ "
        f"if constexpr (requires {{ ::cpu_backend::KernelArguments<decltype({single})>({arguments_flat}); }}) "
        f"return ::cpu_backend::bind_kernel({single}, ::cpu_backend::KernelArguments<decltype({single})>("
        f"{arguments_original})); "
        f"else return ::cpu_backend::bind_deduced_kernel([&]() -> const void* {{ "
        f"if constexpr (requires {{ {single}; }}) return reinterpret_cast<const void*>({single}); "
        f"else return nullptr; }}(), [&]<typename... cuda_cpu_types_>() {{ "
        f"if constexpr (requires {{ static_cast<void (*)(cuda_cpu_types_...)>({kernel_flat}); }}) "
        f"return static_cast<void (*)(cuda_cpu_types_...)>({kernel_flat}); else return nullptr; }}, "
        f"[&](auto&... cuda_cpu_arguments_) {{ {kernel_flat}(cuda_cpu_arguments_...); }}{comma_flat}{arguments_flat}); "
        f"}}(0))"
    )


EXTERN_SHARED = re.compile(
    r"extern\s+(?P<before>(?:[A-Za-z_][\w:]*(?:\s*\([^()]*\))?\s+)*?)__shared__\s+(?P<type>(?:[^;\[\]{}()]|\(\s*\d+\s*\))*?)"
    r"(?P<name>[A-Za-z_]\w*)\s*\[\s*\]\s*(?P<after>(?:__attribute__\s*\(\([^;]*?\)\)\s*)?);")
ALIGN = re.compile(r"__align__\s*\(\s*\d+\s*\)|alignas\s*\([^()]*\)|__attribute__\s*\(\([^;]*?\)\)")


def scope_is_namespace(text: str, mask: list[bool], position: int) -> bool:
    """Whether `position` is at namespace scope (file, namespace or extern "C" block), not inside a function."""
    depth_kinds = []
    i = 0
    while i < position:
        if mask[i]:
            c = text[i]
            if c == "{":
                head = text[max(0, i - 200):i]
                head_code = head.rsplit(";", 1)[-1].rsplit("}", 1)[-1]
                namespace_like = re.search(r'(\bnamespace\b[\w\s:]*|extern\s*"C(\+\+)?"\s*)$', head_code) is not None
                depth_kinds.append(namespace_like)
            elif c == "}" and depth_kinds:
                depth_kinds.pop()
        i += 1
    return all(depth_kinds)


def translate_text(text: str, path: str = "<input>") -> str:
    """The file's text with its <<<>>> launches and extern __shared__ declarations rewritten, lines unchanged."""
    mask = code_mask(text)
    pieces = []
    position = 0
    search_from = 0
    while True:
        at = text.find(LAUNCH_OPEN, search_from)
        if at < 0:
            break
        search_from = at + 3
        if not all(mask[at:at + 3]):
            continue
        before = skip_space_back(text, mask, at - 1)
        if before >= 7 and text[before - 7:before + 1] == "operator":
            continue
        line = line_of(text, at)
        kernel_start = kernel_expression_start(text, mask, at - 1)
        if kernel_start < 0 or kernel_start < position:
            raise TranslationError(f"{path}:{line}: cannot read the kernel before this <<<")
        # the configuration: up to >>> outside any bracket
        depth = 0
        close = -1
        i = at + 3
        while i < len(text):
            if mask[i]:
                c = text[i]
                if c in "([{":
                    depth += 1
                elif c in ")]}":
                    depth -= 1
                elif depth == 0 and text.startswith(LAUNCH_CLOSE, i):
                    close = i
                    break
            i += 1
        if close < 0:
            raise TranslationError(f"{path}:{line}: this <<< has no matching >>>")
        paren = skip_space_forward(text, mask, close + 3)
        if paren >= len(text) or text[paren] != "(":
            raise TranslationError(f"{path}:{line}: a launch needs its argument list after >>> (kernel<<<...>>>(...))")
        paren_close = match_forward(text, mask, paren)
        if paren_close < 0:
            raise TranslationError(f"{path}:{line}: the launch's argument list is not closed")
        kernel = text[kernel_start:at]
        config = flatten(text, at + 3, close)
        if not config:
            raise TranslationError(f"{path}:{line}: a launch needs at least a grid and a block: kernel<<<grid, block>>>")
        arguments_original = "".join(" " if kind == COMMENT and c != "\n" else c for c, kind in
                                     zip(text[paren + 1:paren_close], character_kinds(text[paren + 1:paren_close])))
        arguments_flat = flatten(text, paren + 1, paren_close)
        # The kernel expression, <<<...>>> and whatever stood between them move onto the launch's first line: the
        # line breaks they held go after the replacement, so that every later line keeps its number.
        head_breaks = ["\\\n" if text[k - 1] == "\\" else "\n" for k in range(kernel_start, paren + 1)
                       if text[k] == "\n"]
        pieces.append(text[position:kernel_start])
        replacement = launch_replacement(kernel, config, arguments_original, arguments_flat)
        pieces.append(replacement)
        pieces.append("".join(head_breaks))
        position = paren_close + 1
        search_from = position
    pieces.append(text[position:])
    translated = "".join(pieces)
    return translate_extern_shared(translate_launch_casts(translated), path)


LAUNCH_CAST = re.compile(r"\b(?P<call>cudaLaunchCooperativeKernel|cudaLaunchKernel)(?P<open>\s*\(\s*)"
                         r"\(\s*(?:const\s+)?void\s*\*\s*\)")


def translate_launch_casts(text: str) -> str:
    """cudaLaunchKernel((void *)kernel, ...) and cudaLaunchCooperativeKernel: the cast dropped, so that the backend's
    overload (runtime.h) sees the kernel's type, which it needs to read the argument array."""
    mask = code_mask(text)
    return LAUNCH_CAST.sub(lambda m: m.group(0) if not mask[m.start()] else
                           m.group("call") + m.group("open") + "\n" * m.group(0).count("\n", m.end("open")), text)


def translate_extern_shared(text: str, path: str) -> str:
    mask = code_mask(text)
    out = []
    position = 0
    for match in EXTERN_SHARED.finditer(text):
        if not mask[match.start()] or match.start() < position:
            continue
        element_type = ALIGN.sub("", match.group("before") + " " + match.group("type")).strip()
        element_type = re.sub(r"\s+", " ", element_type)
        name = match.group("name")
        breaks = match.group(0).count("\n")
        storage = f"reinterpret_cast<{element_type} (*)[]>(::cpu_backend::dynamic_shared_memory())"
        if scope_is_namespace(text, mask, match.start()):
            # At namespace scope the name must mean the dynamic shared memory of whichever block uses it.
            replacement = f"/* extern __shared__ */ inline constexpr ::cpu_backend::DynamicShared<{element_type}> {name}{{}};"
        else:
            replacement = f"{element_type} (&{name})[] = *{storage};"
        out.append(text[position:match.start()])
        out.append(replacement + "\n" * breaks)
        position = match.end()
    out.append(text[position:])
    return "".join(out)


# --- following the includes -------------------------------------------------------------------------------------

INCLUDE = re.compile(r'^(?P<head>[ \t]*#[ \t]*include[ \t]*)(?P<open>["<])(?P<name>[^">]+)[">]', re.M)


def is_system_directory(directory: str, system_roots: list[str]) -> bool:
    real = os.path.realpath(directory)
    return any(real == root or real.startswith(root + os.sep) for root in system_roots)


class Translator:
    """Translates a source file and the project headers it includes into `mirror_root` (absolute original paths
    below it), rewriting their #include lines to name the translated copies."""

    def __init__(self, mirror_root: str, include_dirs: list[str], quote_dirs: list[str], system_roots: list[str]):
        self.mirror_root = os.path.abspath(mirror_root)
        self.include_dirs = include_dirs
        self.quote_dirs = quote_dirs
        self.system_roots = [os.path.realpath(r) for r in system_roots]
        self.done: dict[str, str] = {}

    def mirror_path(self, original: str) -> str:
        return self.mirror_root + os.path.abspath(original)

    def resolve(self, name: str, quoted: bool, from_dir: str) -> str | None:
        candidates = ([from_dir] + self.quote_dirs if quoted else []) + self.include_dirs
        for directory in candidates:
            path = os.path.join(directory, name)
            if os.path.isfile(path):
                if is_system_directory(os.path.dirname(path), self.system_roots):
                    return None
                return os.path.abspath(path)
        return None

    def translate_file(self, original: str) -> str:
        original = os.path.abspath(original)
        if original in self.done:
            return self.done[original]
        target = self.mirror_path(original)
        self.done[original] = target
        with open(original, encoding="utf-8", errors="surrogateescape") as f:
            text = f.read()
        translated = translate_text(text, original)
        directory = os.path.dirname(original)

        def point_at_copy(match: re.Match) -> str:
            resolved = self.resolve(match.group("name"), match.group("open") == '"', directory)
            if resolved is None:
                return match.group(0)
            return f'{match.group("head")}"{self.translate_file(resolved)}"'

        translated = INCLUDE.sub(point_at_copy, translated)
        content = f'#line 1 "{original}"\n{translated}'
        os.makedirs(os.path.dirname(target), exist_ok=True)
        try:
            with open(target, encoding="utf-8", errors="surrogateescape") as f:
                unchanged = f.read() == content
        except OSError:
            unchanged = False
        if not unchanged:  # an unchanged copy keeps its time stamp
            with open(target, "w", encoding="utf-8", errors="surrogateescape") as f:
                f.write(content)
        return target


# The project's common/ (the CPU backend, its CUDA headers, launch.h) holds no CUDA syntax to translate: its headers
# are used as they are, so that a translation unit never holds both a header and a translated copy of it.
PROJECT_COMMON = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "common")


def default_system_roots(extra: list[str] | None = None) -> list[str]:
    roots = ["/usr/include", "/usr/local/include", "/usr/lib", "/opt", PROJECT_COMMON]
    cuda = os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    roots.append(os.path.realpath(cuda))
    return roots + (extra or [])


# --- the compiler launcher ----------------------------------------------------------------------------------------

def run_as_launcher(mirror_root: str, command: list[str]) -> int:
    """`cuda_cpu_translate.py --launcher MIRROR -- COMPILER ARGS...`: if the command compiles a .cu file, compile its
    translation instead (same flags), and make the dependency file name the original files, so that editing a .cu
    or .cuh file rebuilds what includes it."""
    source_index = next((k for k, a in enumerate(command) if a.endswith((".cu", ".cuh")) and os.path.isfile(a)
                         and k > 0 and command[k - 1] not in ("-o", "-MF", "-MT", "-MQ")), None)
    if source_index is None:
        return subprocess.call(command)
    include_dirs, quote_dirs, system_dirs = [], [], []
    k = 0
    while k < len(command):
        arg = command[k]
        for flag, bucket in (("-I", include_dirs), ("-iquote", quote_dirs), ("-isystem", system_dirs)):
            if arg == flag and k + 1 < len(command):
                bucket.append(command[k + 1])
                k += 1
            elif arg.startswith(flag) and len(arg) > len(flag):
                bucket.append(arg[len(flag):])
        k += 1
    translator = Translator(mirror_root, include_dirs, quote_dirs, default_system_roots(system_dirs))
    try:
        translated = translator.translate_file(command[source_index])
    except TranslationError as error:
        print(f"{error} (cpu flavor: tools/cuda_cpu_translate.py)", file=sys.stderr)
        return 1
    command = list(command)
    command[source_index] = translated
    status = subprocess.call(command)
    if status == 0 and "-MF" in command:
        depfile = command[command.index("-MF") + 1]
        try:
            with open(depfile, encoding="utf-8", errors="surrogateescape") as f:
                dependencies = f.read()
            # Each translated copy stands for its original: mirror_root + /abs/path -> /abs/path.
            dependencies = dependencies.replace(translator.mirror_root + "/", "/")
            with open(depfile, "w", encoding="utf-8", errors="surrogateescape") as f:
                f.write(dependencies)
        except OSError:
            pass
    return status


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "--launcher":
        mirror_root = argv[1]
        rest = argv[2:]
        if rest and rest[0] == "--":
            rest = rest[1:]
        return run_as_launcher(mirror_root, rest)
    if len(argv) == 1 and not argv[0].startswith("-"):
        with open(argv[0], encoding="utf-8", errors="surrogateescape") as f:
            try:
                sys.stdout.write(translate_text(f.read(), argv[0]))
            except TranslationError as error:
                print(error, file=sys.stderr)
                return 1
        return 0
    print("usage: cuda_cpu_translate.py FILE.cu  (prints its translation)\n"
          "       cuda_cpu_translate.py --launcher MIRROR_DIR -- COMPILER ARGS...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
