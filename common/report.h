// common/report.h — what a lesson prints, and the same as JSON.
//
// defines: TextTable, format_bytes(), format_config(), timing_table(), memory_table(), transfer_summary(),
//          EpochMetrics + epoch_line(), print_flushed(), ProgressBar, RunReport (--json FILE).
//
// Tables are plain aligned text (no box drawing):
//     phase           ms       %   calls   avg µs       bytes    GB/s
//     h2d          12.31     4.1     469     26.2    36.8 MiB    2.99
// The progress bar goes to stderr and only when stderr is a terminal, so redirected output stays clean.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/cli.h"
#include "common/device_peaks.h"
#include "common/memory_ledger.h"
#include "common/phase_timer.h"
#include "common/phase_work.h"

// "0 B", "512 B", "1.50 KiB", "36.8 MiB", "139.8 GiB" (binary units).
std::string format_bytes(uint64_t bytes);
// `value` with `decimals` decimals ("%.*f"): for table cells.
std::string fixed(double value, int decimals);

class TextTable {
  public:
    // `align`: one character per column, 'l' or 'r'.
    TextTable(std::vector<std::string> headers, std::string align);
    void add_row(std::vector<std::string> cells);
    void add_rule();  // a dashed line (e.g. before a total row)
    std::string render(const std::string& indent = "  ") const;

  private:
    std::vector<std::string> headers_;
    std::string align_;
    std::vector<std::vector<std::string>> rows_;  // an empty row is a rule
};

// Display width of UTF-8 text (code points; "µ" is one column).
size_t display_width(std::string_view text);

// "784-256-10, batch 128, sgd (lr 0.05, momentum 0.9), 3 epochs, seed 1"; names the cosine schedule and the
// --limit/--test-limit cuts when they are used.
std::string format_config(const TrainOptions& options);

// The per-phase table; its title says how the time was measured (GPU events or CPU timings). Below it: what the
// wall time covers (training only), the time in no phase, and what the `host` phase is.
std::string timing_table(const EpochTiming& timing, const std::string& title);
// The same with each phase's work (phase_work.h) set against the time: achieved GFLOP/s and GB/s of device memory
// (the lower bound), and where the peaks are known (a GPU) the percentage of the limit for the phase's kind and
// whether it is compute-, memory- or latency-bound.
std::string timing_table(const EpochTiming& timing, const std::string& title, const EpochWork& work,
                         const DevicePeaks& peaks);
// Current and peak bytes per category for each memory space that holds anything, and cudaMemGetInfo.
std::string memory_table(const MemorySnapshot& memory);
// "bytes moved: host→device 188 MiB (pinned 188 MiB, pageable 0 B) in 470 copies; device→host ..."
std::string transfer_summary(const MemorySnapshot& memory);

struct EpochMetrics {
    int epoch = 0;              // 1-based
    int epochs = 0;             // how many in the run
    double train_loss = 0;      // mean over the epoch's training samples
    double train_accuracy = 0;  // fraction 0..1, from the training forward passes
    double test_accuracy = 0;   // fraction 0..1
    double seconds = 0;         // wall time of the epoch's training
    double samples_per_second = 0;
    double model_flops_per_second = 0;  // forward + backward FLOPs (phase_work.h) / seconds; 0: not counted
    double mfu = -1;                    // model FLOPs utilization: that / the device's peak; < 0: unknown
};
// "epoch 1/3  loss 0.2431  train 92.81%  test 96.20%  61234 samples/s  0.98 s  MFU 12.3%" (MFU where the peak is
// known; the model's GFLOP/s where it is not)
std::string epoch_line(const EpochMetrics& metrics);

// Writes `text` to stdout as it is and flushes: when stdout is a pipe (| tee, a CI log) it is otherwise
// block-buffered, and epoch lines would appear all at once at the end of the run.
void print_flushed(const std::string& text);

class ProgressBar {
  public:
    // Draws only when `enabled` and stderr is a terminal.
    ProgressBar(std::string label, uint64_t total, bool enabled = true);
    ~ProgressBar() { finish(); }
    void update(uint64_t done, double loss = -1);  // redraws at most ~10 times per second
    void finish();                                 // erases the bar
    bool active() const { return active_; }

  private:
    std::string label_;
    uint64_t total_;
    bool active_;
    double last_draw_ = -1;
};

// Everything a run prints, collected for --json FILE. The document is built with nlohmann/json (report.cpp); this
// header sees only its forward declarations, so nvcc compiling a lesson never parses the library. Keys keep the
// order they were added in (nlohmann::ordered_json). Non-finite numbers become null (JSON has no spelling for them).
class RunReport {
  public:
    using Scalar = std::variant<std::string, double, int64_t, bool>;

    explicit RunReport(std::string program);
    ~RunReport();
    RunReport(RunReport&&) noexcept;
    RunReport& operator=(RunReport&&) noexcept;

    void set_device(std::string device) { device_ = std::move(device); }
    void set_data(std::string description) { data_ = std::move(description); }
    void add_config(const std::string& key, Scalar value);
    void add_options(const TrainOptions& options);  // every shared flag's value
    void add_epoch(const EpochMetrics& metrics, const EpochTiming& timing, const EpochWork& work = {});
    void set_device_peaks(const DevicePeaks& peaks) { peaks_ = peaks; }
    void set_memory(const MemorySnapshot& memory) { memory_ = memory, has_memory_ = true; }
    void add_result(const std::string& key, Scalar value);                       // anything else a lesson prints
    void add_result(const std::string& key, const std::vector<double>& values);  // e.g. every step's loss
    // A list of flat objects, e.g. one per run of a comparison: [{"mode": "fp32", "test_accuracy": 0.98}, ...].
    using Row = std::vector<std::pair<std::string, Scalar>>;
    void add_result(const std::string& key, const std::vector<Row>& rows);
    // The "results" object itself, for anything else (nested objects, other arrays). With <nlohmann/json.hpp>:
    //     report.results()["layer_ms"] = {{"fc1", 1.25}, {"fc2", 0.31}};
    nlohmann::ordered_json& results();

    std::string to_json() const;
    // Writes FILE.tmp then renames it over FILE; throws std::runtime_error naming the file on failure.
    void write_json(const std::string& path) const;
    // write_json(); on failure prints "<program>: <message>" and exits with code 1. Does nothing for "".
    void write_json_or_exit(const std::string& path) const;

  private:
    std::string program_, device_, data_;
    std::unique_ptr<nlohmann::ordered_json> config_, results_;  // JSON objects
    struct Epoch {
        EpochMetrics metrics;
        EpochTiming timing;
        EpochWork work;
    };
    std::vector<Epoch> epochs_;
    DevicePeaks peaks_;
    MemorySnapshot memory_;
    bool has_memory_ = false;
};
