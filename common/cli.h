// common/cli.h — the command line every lesson shares, and a way for a lesson to add its own flags.
//
// defines: TrainOptions, OptimizerKind, LrSchedule, scheduled_lr(), Cli (parse / parse_or_exit / usage / given /
//          add_* for lesson flags), CliResult, check_output_file(), check_batch_fits(), require_batch_fits_or_exit().
//
// A lesson's main:
//     TrainOptions options;                        // defaults; a lesson may change them before parsing
//     std::vector<int> batches = {64, 256, 1024};  // a lesson's own flag
//     Cli cli("lesson07_batches", "Sweeps the batch size.", options);
//     cli.add_int_list("--batches", &batches, "LIST", "batch sizes to compare");
//     cli.parse_or_exit(argc, argv);               // --help: usage, exit 0; a bad flag: one message, exit 2
//
// Both `--epochs 3` and `--epochs=3` work; given twice, the last one counts. Numbers are parsed strictly: "12x",
// "1e3" for an integer, "-1", "0" where the minimum is 1, values past the range and a missing value are errors.
// The parsing is CLI11's (cli.cpp); it stays out of this header, which nvcc reads when it compiles a lesson.
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace CLI {
class App;
}

enum class OptimizerKind { sgd, adamw };  // sgd = SGD with (heavy-ball) momentum
const char* optimizer_name(OptimizerKind kind);

enum class LrSchedule { constant, cosine };  // cosine: from --lr down to 0 over the whole run
const char* lr_schedule_name(LrSchedule schedule);

struct TrainOptions {
    int epochs = 3;
    int batch = 128;
    std::vector<int> hidden = {256};  // hidden layer widths: 784 → hidden... → 10
    OptimizerKind optimizer = OptimizerKind::sgd;
    double lr = 0.05;  // when --lr is not given: 0.05 for sgd, adamw_lr for adamw
    LrSchedule lr_schedule = LrSchedule::constant;
    double adamw_lr = 1e-3;     // the default learning rate when --optimizer adamw
    double momentum = 0.9;      // sgd
    double weight_decay = 0.0;  // sgd: L2 added to the gradient; adamw: decoupled (default adamw_weight_decay)
    double adamw_weight_decay = 0.01;
    double beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8;  // adamw
    uint64_t seed = 1;
    std::string data_dir;   // --data; "" = search (see mnist.h)
    size_t limit = 0;       // --limit: train on only the first N training images; 0 = all
    size_t test_limit = 0;  // --test-limit: evaluate on only the first N test images; 0 = all
    std::string json_path;  // --json FILE; "" = none
    bool quiet = false;     // --quiet: no progress bar

    // 784, hidden..., 10
    std::vector<int> layer_sizes() const;
    // The widest layer output (of hidden..., 10): what the per-layer workspaces (the two-pass bias gradient's) are
    // sized for.
    int widest_layer() const;
};

// The learning rate for optimizer step `step` (0-based) of `total_steps`: `lr` for the constant schedule; for
// cosine, lr · ½ · (1 + cos(π · step / total_steps)), so step 0 gets the full lr and the last step nearly 0.
double scheduled_lr(LrSchedule schedule, double lr, long step, long total_steps);
double scheduled_lr(const TrainOptions& options, long step, long total_steps);  // options.lr_schedule, options.lr

struct CliResult {
    enum class Kind { ok, help, error };
    Kind kind = Kind::ok;
    int exit_code = 0;    // 0 for ok and help, 2 for an error
    std::string message;  // usage text for help, one line for an error
};

class Cli {
  public:
    // Registers the shared flags, which write into `options` (kept by reference; it must outlive the Cli). Their
    // defaults, shown by --help, are the values `options` holds now.
    Cli(std::string program, std::string summary, TrainOptions& options);
    ~Cli();
    Cli(const Cli&) = delete;
    Cli& operator=(const Cli&) = delete;

    // A lesson's own flags; the target's current value is the default --help shows. `metavar` names the value in
    // the usage text ("N", "LIST", "FILE"). Adding a flag the Cli already has replaces it (e.g. other limits).
    void add_int(const std::string& flag, int* target, const std::string& metavar, const std::string& help, int min = 1,
                 int max = INT_MAX);
    void add_double(const std::string& flag, double* target, const std::string& metavar, const std::string& help,
                    double min, double max, bool min_inclusive = true);
    void add_int_list(const std::string& flag, std::vector<int>* target, const std::string& metavar,
                      const std::string& help, int min = 1, int max = INT_MAX);
    void add_string(const std::string& flag, std::string* target, const std::string& metavar, const std::string& help);
    // A file the program will write: checked while parsing (check_output_file), so a typo costs no run.
    void add_output_file(const std::string& flag, std::string* target, const std::string& metavar,
                         const std::string& help);
    void add_flag(const std::string& flag, bool* target, const std::string& help);  // takes no value: sets true
    // A string that must be one of `choices` (the usage shows them as the metavar: "v1|v2|v3").
    void add_choice(const std::string& flag, std::string* target, const std::vector<std::string>& choices,
                    const std::string& help);

    // A shared flag this program accepts (so that one ARGS line serves every lesson) but does not use, `why` saying
    // what it uses instead (lesson 07: --samples, not --epochs). --help says so; unused() lists them.
    void mark_unused(const std::string& flag, const std::string& why);
    const std::map<std::string, std::string>& unused() const { return unused_; }

    // Parses argv[1..]. Never prints, never exits (so tests can check every path).
    CliResult parse(int argc, const char* const* argv);
    // parse(), then: help → usage on stdout, exit 0; error → "<program>: <message>" + a hint on stderr, exit 2.
    void parse_or_exit(int argc, char** argv);

    std::string usage() const;
    bool given(const std::string& flag) const;  // was this flag on the command line?
    const std::string& program() const { return program_; }

  private:
    std::string program_;
    TrainOptions& options_;
    std::unique_ptr<CLI::App> app_;
    std::map<std::string, std::string> unused_;  // flag -> why
};

// "" when `path` can be written the way RunReport::write_json does it (as path + ".tmp", then renamed), else
// what is wrong. --json calls it while parsing. Leaves no file behind.
std::string check_output_file(const std::string& path);

// After the data is loaded: "" when `batch` fits, else the message (batch larger than the training set).
std::string check_batch_fits(int batch, size_t train_count);
// check_batch_fits(); on failure prints "<program>: <message>" and exits with code 2.
void require_batch_fits_or_exit(const char* program, int batch, size_t train_count);
