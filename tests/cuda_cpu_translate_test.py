#!/usr/bin/env python3
"""tests/cuda_cpu_translate_test.py — tools/cuda_cpu_translate.py on the spellings that trip a naive rewrite: every
line must stay on its line, only code is rewritten (not comments or strings), and the kernel expression before <<<
is read whole (templates nested to >>>, qualified names, pointers, tables)."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import cuda_cpu_translate as t  # noqa: E402


def kernel_of(translated: str) -> str:
    """The kernel text the first rewritten launch names (LaunchSite's last field)."""
    marker = "__func__, \""
    start = translated.index(marker) + len(marker)
    return translated[start:translated.index("\"}", start)]


class Translate(unittest.TestCase):
    def check_lines_kept(self, source: str) -> str:
        translated = t.translate_text(source, "x.cu")
        self.assertEqual(source.count("\n"), translated.count("\n"), translated)
        return translated

    def test_plain_launch(self):
        out = self.check_lines_kept("void f() { k<<<grid, block>>>(a, b); }\n")
        self.assertNotIn("<<<", out)
        self.assertIn("LaunchConfig(grid, block)", out)
        self.assertEqual(kernel_of(out), "k")

    def test_nested_templates_and_qualified_names(self):
        out = self.check_lines_kept("x = 1;\nns::k<A<B<1>>, 4><<<1, 32, 0, s>>>(p);\n")
        self.assertEqual(kernel_of(out), "ns::k<A<B<1>>, 4>")
        self.assertIn("LaunchConfig(1, 32, 0, s)", out)
        self.assertTrue(out.startswith("x = 1;\n::cpu_backend::launch_from_source"), out)

    def test_pointer_and_table_and_keyword_before(self):
        self.assertEqual(kernel_of(self.check_lines_kept("if (x) (*fp)<<<1, 1>>>();\n")), "(*fp)")
        self.assertEqual(kernel_of(self.check_lines_kept("else kernels[i]<<<1, 1>>>(q);\n")), "kernels[i]")
        self.assertEqual(kernel_of(self.check_lines_kept("return ::k<<<1, 1>>>();\n")), "::k")

    def test_comments_strings_and_operator_left_alone(self):
        source = ('// k<<<1, 1>>>()\n/* k<<<1,1>>>()\n */ const char* s = "k<<<1, 1>>>()";\n'
                  "char c = '<'; auto r = R\"(k<<<1,1>>>())\";\n"
                  "template <class T> std::ostream& operator<<<T>(std::ostream&, const T&);\n")
        self.assertEqual(self.check_lines_kept(source), source)

    def test_launch_across_lines_with_comments(self):
        source = ("k<T><<<dim3(n / 2, m), // grid\n    block,\n    0>>>(a,  // first\n      b /* second */);\nnext();\n")
        out = self.check_lines_kept(source)
        self.assertIn("LaunchConfig(dim3(n / 2, m), block, 0)", out)
        self.assertTrue(out.endswith("next();\n"))
        self.assertNotIn("// first", out)  # a comment inside the arguments would swallow the rest of the line

    def test_macro_keeps_its_continuations(self):
        source = "#define RUN(k) k<<<1, 1>>>(a, \\\n    b)\nint after;\n"
        out = self.check_lines_kept(source)
        self.assertTrue(out.split("\n")[0].endswith("\\"), out)

    def test_config_shifts_are_not_the_end(self):
        out = self.check_lines_kept("k<<<(n >> 1), f(a >> 2)>>>(x);\n")
        self.assertIn("LaunchConfig((n >> 1), f(a >> 2))", out)

    def test_void_cast_of_a_launched_kernel_dropped(self):
        source = ('e = cudaLaunchCooperativeKernel((void *)reduce, grid, block, args, smem, NULL);\n'
                  'cudaLaunchKernel( (const void*)\n  k<float>, 1, 1, args);\n'
                  '// cudaLaunchKernel((void*)k, 1, 1, args)\nf((void*)k);\n')
        out = self.check_lines_kept(source)
        self.assertIn("cudaLaunchCooperativeKernel(reduce, grid", out)
        self.assertIn("cudaLaunchKernel( \n  k<float>, 1", out)
        self.assertIn("// cudaLaunchKernel((void*)k, 1, 1, args)\nf((void*)k);", out)  # a comment, another call

    def test_extern_shared(self):
        out = self.check_lines_kept("__global__ void k() {\n    extern __shared__ __align__(16) float tile[];\n}\n"
                                    "extern __shared__ int file_scope[];\n")
        self.assertIn("float (&tile)[] = *reinterpret_cast<float (*)[]>(::cpu_backend::dynamic_shared_memory());",
                      out)
        self.assertIn("::cpu_backend::DynamicShared<int> file_scope{};", out)

    def test_malformed_launches_name_their_line(self):
        for source, message in (("\n\nk<<<1, 1>>>;\n", "x.cu:3: a launch needs its argument list"),
                                ("k<<<1, 1(x);\n", "x.cu:1: this <<< has no matching >>>"),
                                ("k<<<>>>(x);\n", "x.cu:1: a launch needs at least a grid and a block")):
            with self.assertRaises(t.TranslationError) as raised:
                t.translate_text(source, "x.cu")
            self.assertIn(message, str(raised.exception))

    def test_includes_point_at_translated_copies(self):
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "src", "inc"))
            with open(os.path.join(root, "src", "main.cu"), "w") as f:
                f.write('#include "inc/helper.cuh"\n#include <vector>\nint main() { k<<<1, 1>>>(); }\n')
            with open(os.path.join(root, "src", "inc", "helper.cuh"), "w") as f:
                f.write("#pragma once\n__global__ void k() {}\nvoid h() { k<<<2, 2>>>(); }\n")
            mirror = os.path.join(root, "mirror")
            translator = t.Translator(mirror, [], [], t.default_system_roots())
            main_copy = translator.translate_file(os.path.join(root, "src", "main.cu"))
            with open(main_copy) as f:
                text = f.read()
            self.assertTrue(text.startswith(f'#line 1 "{os.path.join(root, "src", "main.cu")}"\n'), text)
            helper_copy = mirror + os.path.join(root, "src", "inc", "helper.cuh")
            self.assertIn(f'#include "{helper_copy}"', text)
            self.assertIn("#include <vector>", text)  # a system header is left as it is
            with open(helper_copy) as f:
                self.assertNotIn("<<<", f.read())


if __name__ == "__main__":
    unittest.main()
