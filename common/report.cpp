// common/report.cpp — see report.h.
// Standard headers first: the cpu backend redefines CUDA qualifiers such as __noinline__, which libstdc++'s
// <memory> (pulled in by <filesystem>/<fstream>) spells as an attribute.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "common/report.h"

namespace {

std::string printf_string(const char* format, double value) {
    char text[64];
    std::snprintf(text, sizeof text, format, value);
    return text;
}

// The lines under a timing table: what the wall time covers and what the table cannot show (learners compare the
// two sums).
std::string timing_notes(const EpochTiming& timing) {
    const double sum = timing.phases_ms();
    std::string notes =
        "  wall " + printf_string("%.2f", timing.wall_ms) +
        " ms: the host clock around training only (data loading and test-set evaluation are not in it)\n";
    if (sum <= timing.wall_ms) {
        notes += "  " + printf_string("%.2f", timing.wall_ms - sum) +
                 " ms in no phase (between phases: launch gaps, waits, bookkeeping)\n";
    } else {
        notes += "  phases may overlap (e.g. a copy on another stream), so their sum can exceed wall\n";
    }
    notes += "  host = the CPU's own work inside the training loop (e.g. gathering the next batch)";
    // The clock's description says whether there were CUDA events at all (the reference trainer has none).
    if (timing.clock.find("CUDA events") != std::string::npos) notes += "; GPU phases are timed with CUDA events";
    return notes + "\n";
}

double seconds_now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string fixed(double value, int decimals) {
    char text[32];
    std::snprintf(text, sizeof text, "%.*f", decimals, value);
    return text;
}

std::string format_bytes(uint64_t bytes) {
    if (bytes < 1024) return std::to_string(bytes) + " B";
    const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    double value = double(bytes) / 1024.0;
    int unit = 0;
    while (value >= 1024.0 && unit < 4) {
        value /= 1024.0;
        ++unit;
    }
    char text[32];
    std::snprintf(text, sizeof text, value < 10 ? "%.2f %s" : value < 100 ? "%.1f %s" : "%.0f %s", value, units[unit]);
    return text;
}

size_t display_width(std::string_view text) {
    size_t width = 0;
    for (const char c : text) width += (static_cast<unsigned char>(c) & 0xC0) != 0x80;  // skip continuation bytes
    return width;
}

TextTable::TextTable(std::vector<std::string> headers, std::string align)
    : headers_(std::move(headers)), align_(std::move(align)) {
    align_.resize(headers_.size(), 'r');
}

void TextTable::add_row(std::vector<std::string> cells) {
    cells.resize(headers_.size());
    rows_.push_back(std::move(cells));
}

void TextTable::add_rule() {
    rows_.emplace_back();
}

std::string TextTable::render(const std::string& indent) const {
    std::vector<size_t> widths(headers_.size());
    for (size_t c = 0; c < headers_.size(); ++c) widths[c] = display_width(headers_[c]);
    for (const auto& row : rows_) {
        for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], display_width(row[c]));
    }
    size_t line_width = 0;
    for (size_t w : widths) line_width += w;
    line_width += 3 * (widths.size() - 1);
    const auto render_row = [&](const std::vector<std::string>& cells) {
        std::string line = indent;
        for (size_t c = 0; c < cells.size(); ++c) {
            const std::string padding(widths[c] - display_width(cells[c]), ' ');
            if (c > 0) line += "   ";
            line += align_[c] == 'l' ? cells[c] + padding : padding + cells[c];
        }
        while (!line.empty() && line.back() == ' ') line.pop_back();
        return line + "\n";
    };
    std::string out = render_row(headers_);
    out += indent + std::string(line_width, '-') + "\n";
    for (const auto& row : rows_) {
        out += row.empty() ? indent + std::string(line_width, '-') + "\n" : render_row(row);
    }
    return out;
}

std::string format_config(const TrainOptions& o) {
    std::string layers;
    for (int size : o.layer_sizes()) {
        if (!layers.empty()) layers += '-';
        layers += std::to_string(size);
    }
    std::string optimizer = std::string(optimizer_name(o.optimizer)) + " (lr " + printf_string("%g", o.lr);
    if (o.lr_schedule == LrSchedule::cosine) optimizer += " with cosine decay to 0";
    if (o.optimizer == OptimizerKind::sgd) {
        optimizer += ", momentum " + printf_string("%g", o.momentum);
    } else {
        optimizer += ", betas " + printf_string("%g", o.beta1) + "/" + printf_string("%g", o.beta2);
    }
    if (o.weight_decay > 0) optimizer += ", weight decay " + printf_string("%g", o.weight_decay);
    optimizer += ")";
    std::string text = layers + ", batch " + std::to_string(o.batch) + ", " + optimizer + ", ";
    if (o.epochs > 0) text += std::to_string(o.epochs) + (o.epochs == 1 ? " epoch, " : " epochs, ");  // 0: not used
    text += "seed " + std::to_string(o.seed);
    if (o.limit > 0) text += ", first " + std::to_string(o.limit) + " training images only";
    if (o.test_limit > 0) text += ", first " + std::to_string(o.test_limit) + " test images only";
    return text;
}

std::string timing_table(const EpochTiming& timing, const std::string& title) {
    TextTable table({"phase", "ms", "%", "calls", "avg µs", "bytes", "GB/s"}, "lrrrrrr");
    const double sum = timing.phases_ms();
    for (int p = 0; p < kPhaseCount; ++p) {
        const PhaseTotals& t = timing.phases[p];
        if (t.calls == 0) continue;
        table.add_row({phase_name(Phase(p)), printf_string("%.2f", t.ms),
                       printf_string("%.1f", sum > 0 ? 100.0 * t.ms / sum : 0.0), std::to_string(t.calls),
                       printf_string("%.1f", 1000.0 * t.ms / double(t.calls)), t.bytes ? format_bytes(t.bytes) : "",
                       t.bytes ? printf_string("%.2f", EpochTiming::gb_per_s(t.bytes, t.ms)) : ""});
    }
    table.add_rule();
    table.add_row({"phases", printf_string("%.2f", sum), "100.0", "", "", "", ""});
    return title + " — " + timing.clock + "\n" + table.render() + timing_notes(timing);
}

std::string timing_table(const EpochTiming& timing, const std::string& title, const EpochWork& work,
                         const DevicePeaks& peaks) {
    TextTable table({"phase", "ms", "%", "calls", "avg µs", "bytes", "GB/s", "GFLOP/s", "dev GB/s", "% of peak",
                     "bound"},
                    "lrrrrrrrrrl");
    const double sum = timing.phases_ms();
    for (int p = 0; p < kPhaseCount; ++p) {
        const PhaseTotals& t = timing.phases[p];
        if (t.calls == 0) continue;
        const PhaseWork& w = work[p];
        const double seconds = t.ms * 1e-3;
        const double flops_per_s = seconds > 0 ? w.flops / seconds : 0.0;
        const double bytes_per_s = seconds > 0 ? w.bytes_device / seconds : 0.0;
        std::string percent, bound;
        const double flop_peak = w.tensor_core ? peaks.fp16_tensor_flops : peaks.fp32_flops;
        if (peaks.known && (w.flops > 0 || w.bytes_device > 0) && (w.flops == 0 || flop_peak > 0)) {
            bound = bound_kind(peaks, flops_per_s, bytes_per_s, w.tensor_core);
            const double fraction = bound == "memory" || w.flops == 0 ? bytes_per_s / peaks.dram_bytes_per_s
                                                                       : flops_per_s / flop_peak;
            percent = printf_string("%.1f", 100.0 * fraction);
        } else if (peaks.known && w.flops > 0) {
            percent = "?";  // a tensor-core phase on an architecture whose tensor rate the table leaves out
        } else if (peaks.known && p == int(Phase::h2d) && t.bytes && peaks.h2d_bytes_per_s > 0) {
            // Against what the bandwidth probe measured on this machine (64 MiB from pinned memory).
            percent = printf_string("%.1f", 100.0 * EpochTiming::gb_per_s(t.bytes, t.ms) * 1e9 / peaks.h2d_bytes_per_s);
            bound = "PCIe";
        }
        table.add_row({phase_name(Phase(p)), printf_string("%.2f", t.ms),
                       printf_string("%.1f", sum > 0 ? 100.0 * t.ms / sum : 0.0), std::to_string(t.calls),
                       printf_string("%.1f", 1000.0 * t.ms / double(t.calls)), t.bytes ? format_bytes(t.bytes) : "",
                       t.bytes ? printf_string("%.2f", EpochTiming::gb_per_s(t.bytes, t.ms)) : "",
                       w.flops > 0 ? printf_string("%.2f", flops_per_s / 1e9) : "",
                       w.bytes_device > 0 ? printf_string("%.2f", bytes_per_s / 1e9) : "", percent, bound});
    }
    table.add_rule();
    table.add_row({"phases", printf_string("%.2f", sum), "100.0", "", "", "", "", "", "", "", ""});
    std::string notes = timing_notes(timing);
    notes += "  GFLOP/s, dev GB/s: each phase's FLOPs and the device-memory bytes it must move at least (each input read "
             "once, each output written once: common/phase_work.h), per second of its time\n";
    if (peaks.known) {
        char line[400];
        std::snprintf(line, sizeof line,
                      "  %% of peak: of the phase's limit (fp32 %.1f TFLOP/s, fp16 tensor %.0f TFLOP/s, DRAM %.0f "
                      "GB/s: sm_%d%d, %d SMs at %.0f MHz); bound: compute or memory when it reaches 20 %% of that "
                      "limit, else latency (launch- or latency-bound)\n",
                      peaks.fp32_flops / 1e12, peaks.fp16_tensor_flops / 1e12, peaks.dram_bytes_per_s / 1e9,
                      peaks.major, peaks.minor, peaks.sm_count, peaks.sm_clock_hz / 1e6);
        notes += line;
        if (peaks.h2d_bytes_per_s > 0) {
            std::snprintf(line, sizeof line, "  h2d %% of peak: of the bandwidth probe's 64 MiB pinned copy, %.2f GB/s\n",
                          peaks.h2d_bytes_per_s / 1e9);
            notes += line;
        }
    } else {
        notes += "  % of peak: " + peaks.why_unknown + "\n";
    }
    return title + " — " + timing.clock + "\n" + table.render() + notes;
}

std::string memory_table(const MemorySnapshot& m) {
    std::string out;
    for (int s = 0; s < kMemorySpaceCount; ++s) {
        const CategoryUsage& total = m.total[s];
        if (total.peak == 0) continue;
        // The percentages are of the current total, so they add up to 100. Peaks are per category and may
        // have happened at different times: the total's peak is the peak of the sum, not the sum of the peaks.
        TextTable table({"category", "current", "% of current", "peak"}, "lrrr");
        for (int c = 0; c < kMemoryCategoryCount; ++c) {
            const CategoryUsage& u = m.by_space[s][c];
            if (u.peak == 0) continue;
            table.add_row(
                {memory_category_name(MemoryCategory(c)), format_bytes(u.current),
                 total.current > 0 ? printf_string("%.1f", 100.0 * double(u.current) / double(total.current)) : "",
                 format_bytes(u.peak)});
        }
        table.add_rule();
        table.add_row(
            {"total", format_bytes(total.current), total.current > 0 ? "100.0" : "", format_bytes(total.peak)});
        if (!out.empty()) out += "\n";
        out += std::string(memory_space_name(MemorySpace(s))) + " memory allocated by this program, by category\n" +
               table.render();
    }
    if (out.empty()) {
        out = "no memory allocated through common/memory_ledger.h\n";
    } else {
        out +=
            "  every allocation goes through common/memory_ledger.h; total peak = peak of the sum, not the sum of "
            "the peaks\n";
    }
    if (m.device_queried) {
        out += "  device (cudaMemGetInfo): " + format_bytes(m.device_free_before) + " free of " +
               format_bytes(m.device_total_before) + " before the first allocation, " +
               format_bytes(m.device_free_now) + " free now\n";
    }
    return out;
}

std::string transfer_summary(const MemorySnapshot& m) {
    const auto direction = [](const char* name, uint64_t pinned, uint64_t pageable, uint64_t copies) {
        return std::string(name) + " " + format_bytes(pinned + pageable) + " (pinned " + format_bytes(pinned) +
               ", pageable " + format_bytes(pageable) + ") in " + std::to_string(copies) +
               (copies == 1 ? " copy" : " copies");
    };
    return "bytes moved: " + direction("host→device", m.h2d_pinned_bytes, m.h2d_pageable_bytes, m.h2d_copies) + "; " +
           direction("device→host", m.d2h_pinned_bytes, m.d2h_pageable_bytes, m.d2h_copies) + "\n";
}

std::string epoch_line(const EpochMetrics& e) {
    char text[256];
    std::snprintf(text, sizeof text, "epoch %d/%d  loss %.4f  train %.2f%%  test %.2f%%  %.0f samples/s  %.2f s",
                  e.epoch, e.epochs, e.train_loss, 100.0 * e.train_accuracy, 100.0 * e.test_accuracy,
                  e.samples_per_second, e.seconds);
    std::string line = text;
    if (e.mfu >= 0)
        line += printf_string("  MFU %.1f%%", 100.0 * e.mfu);
    else if (e.model_flops_per_second > 0)
        line += printf_string("  model %.2f GFLOP/s", e.model_flops_per_second / 1e9);
    return line;
}

void print_flushed(const std::string& text) {
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
}

ProgressBar::ProgressBar(std::string label, uint64_t total, bool enabled)
    : label_(std::move(label)), total_(total), active_(enabled && total > 0 && isatty(STDERR_FILENO)) {}

void ProgressBar::update(uint64_t done, double loss) {
    if (!active_) return;
    const double now = seconds_now();
    if (done < total_ && last_draw_ >= 0 && now - last_draw_ < 0.1) return;
    last_draw_ = now;
    constexpr int kWidth = 30;
    const uint64_t clamped = std::min(done, total_);
    const int filled = static_cast<int>(kWidth * clamped / total_);
    std::string bar = "\r" + label_ + " [" + std::string(filled, '#') + std::string(kWidth - filled, '.') + "] " +
                      std::to_string(clamped) + "/" + std::to_string(total_);
    if (loss >= 0) bar += printf_string("  loss %.4f", loss);
    bar += "\033[K";  // erase what a longer previous line left
    std::fputs(bar.c_str(), stderr);
    std::fflush(stderr);
}

void ProgressBar::finish() {
    if (!active_) return;
    std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
    active_ = false;
}

using Json = nlohmann::ordered_json;  // keys in the order written, so the file reads like the printout

namespace {

// JSON keys are snake_case; the printed tables keep the spaced names ("optimizer state", "host pinned").
std::string json_key(std::string name) {
    std::replace(name.begin(), name.end(), ' ', '_');
    return name;
}

Json scalar_json(const RunReport::Scalar& value) {
    return std::visit([](const auto& v) { return Json(v); }, value);
}

Json timing_json(const EpochTiming& t, const EpochWork& work = {}) {
    Json phases = Json::object();
    for (int p = 0; p < kPhaseCount; ++p) {
        const PhaseTotals& totals = t.phases[p];
        if (totals.calls == 0) continue;
        Json phase = {{"ms", totals.ms},
                      {"calls", totals.calls},
                      {"avg_us", 1000.0 * totals.ms / double(totals.calls)},
                      {"bytes", totals.bytes},
                      {"gb_per_s", EpochTiming::gb_per_s(totals.bytes, totals.ms)}};
        if (work[p].flops > 0 || work[p].bytes_device > 0) {  // phase_work.h: FLOPs, device bytes (lower bound)
            phase["flops"] = work[p].flops;
            phase["bytes_device"] = work[p].bytes_device;
            phase["tensor_core"] = work[p].tensor_core;
        }
        phases[json_key(phase_name(Phase(p)))] = phase;
    }
    return {{"clock", t.clock}, {"wall_ms", t.wall_ms}, {"phases_ms", t.phases_ms()}, {"phases", phases}};
}

Json usage_json(const CategoryUsage& usage) {
    return {{"current_bytes", uint64_t(usage.current)}, {"peak_bytes", uint64_t(usage.peak)}};
}

Json memory_json(const MemorySnapshot& m) {
    Json memory = Json::object();
    for (int s = 0; s < kMemorySpaceCount; ++s) {
        Json space = Json::object();
        for (int c = 0; c < kMemoryCategoryCount; ++c) {
            space[json_key(memory_category_name(MemoryCategory(c)))] = usage_json(m.by_space[s][c]);
        }
        space["total"] = usage_json(m.total[s]);
        memory[json_key(memory_space_name(MemorySpace(s)))] = space;
    }
    if (m.device_queried) {
        memory["device_info"] = {{"free_before_bytes", uint64_t(m.device_free_before)},
                                 {"total_bytes", uint64_t(m.device_total_before)},
                                 {"free_now_bytes", uint64_t(m.device_free_now)}};
    }
    return memory;
}

Json transfers_json(const MemorySnapshot& m) {
    return {{"h2d_pageable_bytes", m.h2d_pageable_bytes},
            {"h2d_pinned_bytes", m.h2d_pinned_bytes},
            {"d2h_pageable_bytes", m.d2h_pageable_bytes},
            {"d2h_pinned_bytes", m.d2h_pinned_bytes},
            {"h2d_copies", m.h2d_copies},
            {"d2h_copies", m.d2h_copies}};
}

}  // namespace

RunReport::RunReport(std::string program)
    : program_(std::move(program)),
      config_(std::make_unique<Json>(Json::object())),
      results_(std::make_unique<Json>(Json::object())) {}

RunReport::~RunReport() = default;
RunReport::RunReport(RunReport&&) noexcept = default;
RunReport& RunReport::operator=(RunReport&&) noexcept = default;

void RunReport::add_config(const std::string& key, Scalar value) {
    (*config_)[key] = scalar_json(value);
}

void RunReport::add_result(const std::string& key, Scalar value) {
    (*results_)[key] = scalar_json(value);
}

void RunReport::add_result(const std::string& key, const std::vector<double>& values) {
    (*results_)[key] = values;
}

void RunReport::add_result(const std::string& key, const std::vector<Row>& rows) {
    Json list = Json::array();
    for (const Row& row : rows) {
        Json object = Json::object();
        for (const auto& [name, value] : row) object[name] = scalar_json(value);
        list.push_back(std::move(object));
    }
    (*results_)[key] = std::move(list);
}

Json& RunReport::results() {
    return *results_;
}

void RunReport::add_options(const TrainOptions& o) {
    std::string layers;
    for (int size : o.layer_sizes()) {
        if (!layers.empty()) layers += '-';
        layers += std::to_string(size);
    }
    add_config("layers", layers);
    add_config("epochs", int64_t{o.epochs});
    add_config("batch", int64_t{o.batch});
    add_config("optimizer", std::string(optimizer_name(o.optimizer)));
    add_config("lr", o.lr);
    add_config("lr_schedule", std::string(lr_schedule_name(o.lr_schedule)));
    if (o.optimizer == OptimizerKind::sgd) {
        add_config("momentum", o.momentum);
    } else {
        add_config("beta1", o.beta1);
        add_config("beta2", o.beta2);
        add_config("epsilon", o.epsilon);
    }
    add_config("weight_decay", o.weight_decay);
    add_config("seed", std::to_string(o.seed));  // a string: JSON readers may hold numbers as doubles (53 bits)
    add_config("limit", int64_t(o.limit));
    add_config("test_limit", int64_t(o.test_limit));
}

void RunReport::add_epoch(const EpochMetrics& metrics, const EpochTiming& timing, const EpochWork& work) {
    epochs_.push_back(Epoch{metrics, timing, work});
}

std::string RunReport::to_json() const {
    Json epochs = Json::array();
    for (const auto& [m, timing, work] : epochs_) {
        Json epoch = {{"epoch", m.epoch},
                      {"train_loss", m.train_loss},
                      {"train_accuracy", m.train_accuracy},
                      {"test_accuracy", m.test_accuracy},
                      {"seconds", m.seconds},
                      {"samples_per_second", m.samples_per_second},
                      {"timing", timing_json(timing, work)}};
        if (m.model_flops_per_second > 0) epoch["model_flops_per_second"] = m.model_flops_per_second;
        if (m.mfu >= 0) epoch["mfu"] = m.mfu;
        epochs.push_back(epoch);
    }
    Json document = {{"program", program_}, {"backend", BACKEND_NAME}, {"device", device_},   {"data", data_},
                     {"config", *config_},  {"epochs", epochs},        {"results", *results_}};
    // The device's limits (device_peaks.h), null values where unknown (the CPU backend).
    Json peaks = {{"known", peaks_.known}};
    if (peaks_.known) {
        peaks.update({{"compute_capability", std::to_string(peaks_.major) + "." + std::to_string(peaks_.minor)},
                      {"sm_count", peaks_.sm_count},
                      {"sm_clock_hz", peaks_.sm_clock_hz},
                      {"memory_clock_hz", peaks_.memory_clock_hz},
                      {"bus_width_bits", peaks_.bus_width_bits},
                      {"fp32_flops", peaks_.fp32_flops},
                      {"fp16_tensor_flops", peaks_.fp16_tensor_flops},
                      {"dram_bytes_per_s", peaks_.dram_bytes_per_s}});
        if (peaks_.h2d_bytes_per_s > 0) peaks["h2d_bytes_per_s_measured"] = peaks_.h2d_bytes_per_s;
    } else {
        peaks["why_unknown"] = peaks_.why_unknown;
    }
    document["device_peaks"] = peaks;
    if (has_memory_) {
        document["memory"] = memory_json(memory_);
        document["transfers"] = transfers_json(memory_);
    }
    // NaN and infinities are written as null. Invalid UTF-8 (say, a path in another encoding) is replaced by
    // U+FFFD instead of throwing after the whole run.
    return document.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

void RunReport::write_json(const std::string& path) const {
    const std::string temporary = path + ".tmp";
    std::error_code error;
    {
        std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
        if (!out) throw std::runtime_error("cannot write " + path + " (cannot create " + temporary + ")");
        out << to_json();
        out.close();  // close() flushes; a full disk shows up here
        if (!out) {
            std::filesystem::remove(temporary, error);  // no half-written FILE.tmp left behind
            throw std::runtime_error("cannot write " + path + " (writing " + temporary + " failed)");
        }
    }
    std::filesystem::rename(temporary, path, error);
    if (error) {
        std::filesystem::remove(temporary, error);
        throw std::runtime_error("cannot write " + path + " (rename failed)");
    }
}

void RunReport::write_json_or_exit(const std::string& path) const {
    if (path.empty()) return;
    try {
        write_json(path);
    } catch (const std::exception& error) {
        std::fprintf(stderr, "%s: %s\n", program_.c_str(), error.what());
        std::exit(1);
    }
}
