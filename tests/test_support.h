// tests/test_support.h — what every test file includes: Catch2 (2.x or 3.x), device detection and skipping,
// device buffers, seeded random inputs, NaN poisoning, and the `abs + |ref|·eps` comparison.
#pragma once

#if CATCH2_MAJOR >= 3
#include <catch2/catch_all.hpp>
#else
#include <catch2/catch.hpp>
#endif

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/device_buffer.h"
#include "common/launch.h"
#include "common/mnist.h"

// The tests use the project's helpers unqualified (user code keeps these names free: they are in cuda_teach).
using cuda_teach::ceil_div;
#if defined(CUDA_TEACH_CPU) || defined(__CUDACC__)
using cuda_teach::dynamic_shared;
using cuda_teach::launch;
using cuda_teach::try_launch;
#endif

namespace test_support {

// True when kernels can run: always on the CPU backend; on the cuda flavor only if a GPU is visible.
bool device_available();
std::string no_device_reason();

// Marks the current test as skipped (not passed): prints kSkipMarker and the reason on stdout, which CTest's
// SKIP_REGULAR_EXPRESSION matches (tests/CMakeLists.txt), then ends the test (Catch2 3: SKIP(); Catch2 2: the
// process exits, as it cannot skip one test). No exit code means "skipped": Catch2 2 exits with the number of failed
// assertions, any number. A test that has already failed an assertion is failed here instead, never skipped.
// Nothing else may print the marker: a test whose output contains it is reported as skipped, whatever its exit code.
inline constexpr const char* kSkipMarker = "test_support::exit_skipped: SKIPPED:";
[[noreturn]] void exit_skipped(const std::string& reason);

// A seeded generator for this test: fresh inputs per test case (the seed mixes the test's name with Catch's
// --rng-seed), the same inputs every time the same test runs with the same seed.
std::mt19937_64 rng_for_test();
std::vector<float> random_floats(std::mt19937_64& rng, size_t count, float lo = -1.0f, float hi = 1.0f);

// Tolerance for a value computed in float: |got - ref| <= abs + |ref| * rel.
bool close_enough(double got, double ref, double abs_tol, double rel_tol);

// Compares element by element; on the first few mismatches prints index, got, ref. NaN never matches.
// Returns the number of mismatches (so a test writes REQUIRE(count_mismatches(...) == 0)).
size_t count_mismatches(const std::vector<float>& got, const std::vector<double>& ref, double abs_tol, double rel_tol,
                        const char* what = "");

// Device buffers, poisoned with NaN bytes when created (common/device_buffer.h).
using ::DeviceBuffer;

// Runs `body` in a forked child process (stdout and stderr captured) and reports how it ended: for must-fail
// tests of things that abort the process. CPU backend only (a CUDA context does not survive fork).
struct ChildResult {
    bool exited_normally = false;  // returned from `body` or called exit()
    int exit_code = -1;
    int signal = 0;  // the signal that ended it, if any (SIGABRT for the backend's kernel faults)
    std::string output;
};
ChildResult run_in_child(void (*body)());

// A fresh empty directory under the system temp dir, removed (with what is in it) at the end of the test.
struct TempDir {
    std::filesystem::path path;
    TempDir();
    ~TempDir();
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    std::string file(const std::string& name) const { return (path / name).string(); }
};

// MNIST_DIR as an absolute path; a relative one (CI sets ../shared/data/mnist) is tried from the current directory
// and from the repository root. "" when unset.
std::string mnist_dir_for_tests();

// A small learnable stand-in for MNIST: class c lights up rows 2c+3..2c+5 of the image, plus noise.
MnistSplit synthetic_split(std::mt19937_64& rng, size_t count);
// Writes train and test as the four uncompressed IDX files into the existing directory `dir`.
void write_idx_dataset(const std::string& dir, const MnistSplit& train, const MnistSplit& test);

}  // namespace test_support

// Put first in every test that launches a kernel or allocates device memory.
#define REQUIRE_DEVICE()                                                  \
    do {                                                                  \
        if (!test_support::device_available()) {                          \
            test_support::exit_skipped(test_support::no_device_reason()); \
        }                                                                 \
    } while (0)
