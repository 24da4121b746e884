// tests/test_support.cpp — the test main and the helpers declared in test_support.h.
#define CATCH_CONFIG_RUNNER
#include "tests/test_support.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
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

void exit_skipped(const std::string& reason) {
#if CATCH2_MAJOR >= 3
    SKIP(reason);
#endif
    // Catch2 2.x cannot mark one test as skipped: end the process with CTest's skip code (4). Run by hand, this
    // stops the whole run loudly rather than let the remaining device tests report success.
    std::fprintf(stderr, "SKIPPED: %s\n", reason.c_str());
    std::fflush(stderr);
    std::_Exit(4);
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

}  // namespace test_support

int main(int argc, char** argv) {
    return Catch::Session().run(argc, argv);
}
