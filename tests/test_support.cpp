// tests/test_support.cpp — the test main and the helpers declared in test_support.h.
#define CATCH_CONFIG_RUNNER
#include "tests/test_support.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

#include <sys/wait.h>
#include <unistd.h>

namespace test_support {

bool device_available() {
#if defined(CUDA_TEACH_CPU)
    return true;
#else
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
#endif
}

std::string no_device_reason() {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    return std::string("no CUDA device (cudaGetDeviceCount: ") + cudaGetErrorName(status) +
           "); the cpu flavor runs these tests on the CPU backend";
}

namespace {
// Counts the failed assertions of this process, so that a skip can refuse to hide them (a skip reported by CTest
// is never a failure: see exit_skipped).
size_t failed_assertions = 0;
}  // namespace
}  // namespace test_support

namespace {
#if CATCH2_MAJOR >= 3
struct FailureCounter : Catch::EventListenerBase {
    using EventListenerBase::EventListenerBase;
    void assertionEnded(const Catch::AssertionStats& stats) override {
        if (!stats.assertionResult.isOk()) ++test_support::failed_assertions;
    }
};
#else
struct FailureCounter : Catch::TestEventListenerBase {
    using TestEventListenerBase::TestEventListenerBase;
    bool assertionEnded(const Catch::AssertionStats& stats) override {
        if (!stats.assertionResult.isOk()) ++test_support::failed_assertions;
        return true;
    }
};
#endif
}  // namespace
CATCH_REGISTER_LISTENER(FailureCounter)

namespace test_support {

void exit_skipped(const std::string& reason) {
    // A test that already failed must not be reported as skipped: CTest's SKIP_REGULAR_EXPRESSION wins over the exit
    // code, so the marker is printed only when nothing has failed.
    if (failed_assertions > 0) {
        FAIL("this test asked to be skipped (" << reason << ") after " << failed_assertions
                                               << " failed assertion(s): reported as failed, not skipped");
        std::abort();  // not reached: FAIL throws
    }
    std::printf("%s %s\n", kSkipMarker, reason.c_str());
    std::fflush(stdout);
#if CATCH2_MAJOR >= 3
    SKIP(reason);  // by hand, the rest of the run goes on
#endif
    // Catch2 2 cannot mark one test as skipped: end the process. CTest decides by the marker alone (one test per
    // process); the non-zero code is for a person running the binary by hand, whose run stops loudly here rather
    // than let the remaining tests report success.
    std::_Exit(77);
}

ChildResult run_in_child(void (*body)()) {
    int pipe_fds[2];
    REQUIRE(pipe(pipe_fds) == 0);
    std::fflush(nullptr);
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        // Catch2 handles fatal signals to report them; the child must die of them instead, as a program would.
        for (const int sig : {SIGABRT, SIGSEGV, SIGILL, SIGFPE, SIGBUS, SIGTERM}) std::signal(sig, SIG_DFL);
        dup2(pipe_fds[1], STDOUT_FILENO);
        dup2(pipe_fds[1], STDERR_FILENO);
        close(pipe_fds[0]);
        close(pipe_fds[1]);
        body();
        cudaDeviceSynchronize();  // queued work runs, and its faults show (CUDA_CPU_ASYNC=1: launches return early)
        std::fflush(nullptr);
        std::_Exit(0);
    }
    close(pipe_fds[1]);
    ChildResult result;
    char buffer[4096];
    for (ssize_t got; (got = read(pipe_fds[0], buffer, sizeof buffer)) > 0;) result.output.append(buffer, size_t(got));
    close(pipe_fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    result.exited_normally = WIFEXITED(status);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    result.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    return result;
}

std::mt19937_64 rng_for_test() {
    const std::string name = Catch::getResultCapture().getCurrentTestName();
#if CATCH2_MAJOR >= 3
    const uint64_t catch_seed = Catch::getSeed();
#else
    const uint64_t catch_seed = Catch::rngSeed();
#endif
    const uint64_t seed = std::hash<std::string>{}(name) ^ (catch_seed * 0x9E3779B97F4A7C15ull);
    return std::mt19937_64(seed);
}

std::vector<float> random_floats(std::mt19937_64& rng, size_t count, float lo, float hi) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> values(count);
    for (float& v : values) v = dist(rng);
    return values;
}

bool close_enough(double got, double ref, double abs_tol, double rel_tol) {
    if (std::isnan(got) || std::isnan(ref)) return false;
    if (std::isinf(ref)) return got == ref;
    return std::fabs(got - ref) <= abs_tol + std::fabs(ref) * rel_tol;
}

size_t count_mismatches(const std::vector<float>& got, const std::vector<double>& ref, double abs_tol, double rel_tol,
                        const char* what) {
    REQUIRE(got.size() == ref.size());
    size_t mismatches = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (close_enough(got[i], ref[i], abs_tol, rel_tol)) continue;
        if (mismatches < 5) {
            UNSCOPED_INFO(what << "[" << i << "]: got " << got[i] << ", reference " << ref[i] << ", allowed "
                               << abs_tol + std::fabs(ref[i]) * rel_tol);
        }
        ++mismatches;
    }
    return mismatches;
}

TempDir::TempDir() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("cuda_teach_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
}

TempDir::~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
}

std::string mnist_dir_for_tests() {
    const char* env = std::getenv("MNIST_DIR");
    if (env == nullptr || env[0] == '\0') return "";
    if (std::filesystem::is_directory(env)) return std::filesystem::absolute(env).string();
    const std::filesystem::path from_repo = std::filesystem::path(TEST_SOURCE_DIR) / env;
    return std::filesystem::is_directory(from_repo) ? from_repo.string() : std::string(env);
}

MnistSplit synthetic_split(std::mt19937_64& rng, size_t count) {
    MnistSplit split;
    split.count = count;
    split.images.resize(count * kMnistPixels);
    split.labels.resize(count);
    for (size_t i = 0; i < count; ++i) {
        const int label = static_cast<int>(rng() % 10);
        split.labels[i] = static_cast<uint8_t>(label);
        uint8_t* image = split.images.data() + i * kMnistPixels;
        for (int p = 0; p < kMnistPixels; ++p) image[p] = static_cast<uint8_t>(rng() % 60);
        for (int row = 2 * label + 3; row < 2 * label + 6; ++row) {
            for (int col = 4; col < 24; ++col) image[row * 28 + col] = static_cast<uint8_t>(200 + rng() % 56);
        }
    }
    return split;
}

namespace {

void write_idx(const std::string& path, uint32_t magic, const std::vector<uint32_t>& dims,
               const std::vector<uint8_t>& payload) {
    std::vector<uint8_t> bytes;
    const auto put_u32 = [&bytes](uint32_t value) {  // IDX headers are big-endian
        for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<uint8_t>(value >> shift));
    };
    put_u32(magic);
    for (const uint32_t d : dims) put_u32(d);
    bytes.insert(bytes.end(), payload.begin(), payload.end());
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(out.good());
}

}  // namespace

void write_idx_dataset(const std::string& dir, const MnistSplit& train, const MnistSplit& test) {
    const auto write_split = [&dir](const MnistSplit& split, const char* images, const char* labels) {
        const uint32_t n = static_cast<uint32_t>(split.count);
        write_idx(dir + "/" + images, 2051, {n, 28, 28}, split.images);
        write_idx(dir + "/" + labels, 2049, {n}, split.labels);
    };
    write_split(train, kTrainImagesFile, kTrainLabelsFile);
    write_split(test, kTestImagesFile, kTestLabelsFile);
}

}  // namespace test_support

int main(int argc, char** argv) {
    return Catch::Session().run(argc, argv);
}
