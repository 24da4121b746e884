// common/access_counters.cpp — access_counters.h's functions: the CPU backend's counts in the counting build,
// nothing in every other build.
#include "common/access_counters.h"

#include "common/report.h"

#if defined(CUDA_TEACH_COUNTERS)
#include "common/cpu_backend/internal.h"

bool access_counting_available() {
    return cpu_backend::counting::enabled();
}
std::vector<KernelAccessCounts> access_counts() {
    return cpu_backend::counting::by_kernel();
}
void reset_access_counts() {
    cpu_backend::counting::reset();
}
#else
bool access_counting_available() {
    return false;
}
std::vector<KernelAccessCounts> access_counts() {
    return {};
}
void reset_access_counts() {}
#endif

KernelAccessCounts total_access_counts() {
    KernelAccessCounts total{"all kernels"};
    for (const KernelAccessCounts& k : access_counts()) total += k;
    return total;
}

std::string render_access_counts(const std::vector<KernelAccessCounts>& rows) {
    TextTable table({"kernel", "launches", "global ld req", "sectors/req", "ideal", "global st req", "sectors/req",
                     "ideal", "shared ld req", "wavefronts/req", "shared st req", "wavefronts/req", "bank conflicts"},
                    "lrrrrrrrrrrrr");
    const auto count = [](uint64_t n) { return n ? std::to_string(n) : std::string("-"); };
    const auto per = [](const AccessCounts& c) { return c.requests ? fixed(c.per_request(), 2) : std::string("-"); };
    const auto ideal = [](const AccessCounts& c) {
        return c.requests ? fixed(double(c.ideal_transactions) / double(c.requests), 2) : std::string("-");
    };
    for (const KernelAccessCounts& k : rows) {
        table.add_row({k.kernel, std::to_string(k.launches), count(k.global_load.requests), per(k.global_load),
                       ideal(k.global_load), count(k.global_store.requests), per(k.global_store),
                       ideal(k.global_store), count(k.shared_load.requests), per(k.shared_load),
                       count(k.shared_store.requests), per(k.shared_store),
                       std::to_string(k.shared_load.replays() + k.shared_store.replays())});
    }
    return table.render();
}
