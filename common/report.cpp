// common/report.cpp — see report.h.
// Standard headers first: the cpu backend redefines CUDA qualifiers such as __noinline__, which libstdc++'s
// <memory> (pulled in by <filesystem>/<fstream>) spells as an attribute.
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "common/report.h"

namespace {

std::string printf_string(const char* format, double value) {
    char text[64];
    std::snprintf(text, sizeof text, format, value);
    return text;
}

double seconds_now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

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
    if (o.optimizer == OptimizerKind::sgd) {
        optimizer += ", momentum " + printf_string("%g", o.momentum);
    } else {
        optimizer += ", betas " + printf_string("%g", o.beta1) + "/" + printf_string("%g", o.beta2);
    }
    if (o.weight_decay > 0) optimizer += ", weight decay " + printf_string("%g", o.weight_decay);
    optimizer += ")";
    std::string text = layers + ", batch " + std::to_string(o.batch) + ", " + optimizer + ", " +
                       std::to_string(o.epochs) + (o.epochs == 1 ? " epoch" : " epochs") + ", seed " +
                       std::to_string(o.seed);
    if (o.limit > 0) text += ", first " + std::to_string(o.limit) + " training images only";
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
    char wall[160];
    std::snprintf(wall, sizeof wall, "wall %.2f ms (host clock around the synchronized epoch; %.2f ms in no phase)",
                  timing.wall_ms, std::max(0.0, timing.wall_ms - sum));
    return title + " — " + timing.clock + "\n" + table.render() + "  " + wall + "\n";
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
        out += std::string(memory_space_name(MemorySpace(s))) +
               " memory allocated through the ledger (total peak = peak of the sum, not the sum of the peaks)\n" +
               table.render();
    }
    if (out.empty()) out = "no memory allocated through the ledger\n";
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
    return text;
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

std::string json_escape(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (const char c : text) {
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\b':
                out += "\\b";
                break;
            case '\f':
                out += "\\f";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            default:
                if (static_cast<unsigned char>(c) < 0x20) {  // other control characters must be \u escapes
                    char escaped[8];
                    std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
                    out += escaped;
                } else {
                    out += c;  // UTF-8 passes through unchanged
                }
        }
    }
    return out;
}

void JsonWriter::newline() {
    out_ += '\n';
    out_.append(2 * has_items_.size(), ' ');
}

void JsonWriter::before_value() {
    if (after_key_) {
        after_key_ = false;
        return;
    }
    if (!has_items_.empty()) {
        if (has_items_.back()) out_ += ',';
        has_items_.back() = true;
        newline();
    }
}

JsonWriter& JsonWriter::open(char bracket) {
    before_value();
    out_ += bracket;
    has_items_.push_back(false);
    return *this;
}

JsonWriter& JsonWriter::close(char bracket) {
    const bool had_items = has_items_.back();
    has_items_.pop_back();
    if (had_items) newline();
    out_ += bracket;
    if (has_items_.empty()) out_ += '\n';
    return *this;
}

JsonWriter& JsonWriter::begin_object() {
    return open('{');
}
JsonWriter& JsonWriter::end_object() {
    return close('}');
}
JsonWriter& JsonWriter::begin_array() {
    return open('[');
}
JsonWriter& JsonWriter::end_array() {
    return close(']');
}

JsonWriter& JsonWriter::key(std::string_view name) {
    before_value();
    out_ += '"' + json_escape(name) + "\": ";
    after_key_ = true;
    return *this;
}

JsonWriter& JsonWriter::value(std::string_view text) {
    before_value();
    out_ += '"' + json_escape(text) + '"';
    return *this;
}

JsonWriter& JsonWriter::value(double number) {
    if (!std::isfinite(number)) return null();
    before_value();
    char text[64];
    const auto result = std::to_chars(text, text + sizeof text, number);  // shortest text that reads back exactly
    out_.append(text, result.ptr);
    return *this;
}

JsonWriter& JsonWriter::value(int64_t number) {
    before_value();
    out_ += std::to_string(number);
    return *this;
}

JsonWriter& JsonWriter::value(uint64_t number) {
    before_value();
    out_ += std::to_string(number);
    return *this;
}

JsonWriter& JsonWriter::value(bool flag) {
    before_value();
    out_ += flag ? "true" : "false";
    return *this;
}

JsonWriter& JsonWriter::null() {
    before_value();
    out_ += "null";
    return *this;
}

RunReport::RunReport(std::string program) : program_(std::move(program)) {}

void RunReport::add_config(const std::string& key, Scalar value) {
    config_.emplace_back(key, std::move(value));
}
void RunReport::add_result(const std::string& key, Scalar value) {
    results_.emplace_back(key, std::move(value));
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
    if (o.optimizer == OptimizerKind::sgd) {
        add_config("momentum", o.momentum);
    } else {
        add_config("beta1", o.beta1);
        add_config("beta2", o.beta2);
        add_config("epsilon", o.epsilon);
    }
    add_config("weight_decay", o.weight_decay);
    add_config("seed",
               std::to_string(o.seed));  // a string: JSON readers may hold numbers as doubles (53 bits)
    add_config("limit", int64_t(o.limit));
}

void RunReport::add_epoch(const EpochMetrics& metrics, const EpochTiming& timing) {
    epochs_.emplace_back(metrics, timing);
}

namespace {

void write_scalar(JsonWriter& json, const RunReport::Scalar& value) {
    std::visit([&json](const auto& v) { json.value(v); }, value);
}

void write_timing(JsonWriter& json, const EpochTiming& t) {
    json.begin_object();
    json.key("clock").value(t.clock);
    json.key("wall_ms").value(t.wall_ms);
    json.key("phases_ms").value(t.phases_ms());
    json.key("phases").begin_object();
    for (int p = 0; p < kPhaseCount; ++p) {
        const PhaseTotals& totals = t.phases[p];
        if (totals.calls == 0) continue;
        json.key(phase_name(Phase(p))).begin_object();
        json.key("ms").value(totals.ms);
        json.key("calls").value(totals.calls);
        json.key("avg_us").value(1000.0 * totals.ms / double(totals.calls));
        json.key("bytes").value(totals.bytes);
        json.key("gb_per_s").value(EpochTiming::gb_per_s(totals.bytes, totals.ms));
        json.end_object();
    }
    json.end_object();
    json.end_object();
}

}  // namespace

std::string RunReport::to_json() const {
    JsonWriter json;
    json.begin_object();
    json.key("program").value(program_);
    json.key("backend").value(BACKEND_NAME);
    json.key("device").value(device_);
    json.key("data").value(data_);
    json.key("config").begin_object();
    for (const auto& [key, value] : config_) write_scalar(json.key(key), value);
    json.end_object();
    json.key("epochs").begin_array();
    for (const auto& [m, timing] : epochs_) {
        json.begin_object();
        json.key("epoch").value(m.epoch);
        json.key("train_loss").value(m.train_loss);
        json.key("train_accuracy").value(m.train_accuracy);
        json.key("test_accuracy").value(m.test_accuracy);
        json.key("seconds").value(m.seconds);
        json.key("samples_per_second").value(m.samples_per_second);
        json.key("timing");
        write_timing(json, timing);
        json.end_object();
    }
    json.end_array();
    json.key("results").begin_object();
    for (const auto& [key, value] : results_) write_scalar(json.key(key), value);
    json.end_object();
    if (has_memory_) {
        json.key("memory").begin_object();
        for (int s = 0; s < kMemorySpaceCount; ++s) {
            json.key(memory_space_name(MemorySpace(s))).begin_object();
            for (int c = 0; c < kMemoryCategoryCount; ++c) {
                const CategoryUsage& u = memory_.by_space[s][c];
                json.key(memory_category_name(MemoryCategory(c))).begin_object();
                json.key("current_bytes").value(uint64_t(u.current)).key("peak_bytes").value(uint64_t(u.peak));
                json.end_object();
            }
            json.key("total").begin_object();
            json.key("current_bytes").value(uint64_t(memory_.total[s].current));
            json.key("peak_bytes").value(uint64_t(memory_.total[s].peak));
            json.end_object();
            json.end_object();
        }
        if (memory_.device_queried) {
            json.key("device_info").begin_object();
            json.key("free_before_bytes").value(uint64_t(memory_.device_free_before));
            json.key("total_bytes").value(uint64_t(memory_.device_total_before));
            json.key("free_now_bytes").value(uint64_t(memory_.device_free_now));
            json.end_object();
        }
        json.end_object();
        json.key("bytes_moved").begin_object();
        json.key("host_to_device").begin_object();
        json.key("pinned_bytes").value(memory_.h2d_pinned_bytes);
        json.key("pageable_bytes").value(memory_.h2d_pageable_bytes);
        json.key("copies").value(memory_.h2d_copies);
        json.end_object();
        json.key("device_to_host").begin_object();
        json.key("pinned_bytes").value(memory_.d2h_pinned_bytes);
        json.key("pageable_bytes").value(memory_.d2h_pageable_bytes);
        json.key("copies").value(memory_.d2h_copies);
        json.end_object();
        json.end_object();
    }
    json.end_object();
    return json.str();
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
