// common/cli.cpp — see cli.h.
#include "common/cli.h"

#include <charconv>
#include <filesystem>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

const char* optimizer_name(OptimizerKind kind) {
    return kind == OptimizerKind::adamw ? "adamw" : "sgd";
}

std::vector<int> TrainOptions::layer_sizes() const {
    std::vector<int> sizes{784};
    sizes.insert(sizes.end(), hidden.begin(), hidden.end());
    sizes.push_back(10);
    return sizes;
}

namespace {

std::string in_quotes(const std::string& text) {
    return "'" + text + "'";
}

std::string format_double(double value) {
    char text[64];
    std::snprintf(text, sizeof text, "%g", value);
    return text;
}

std::string join_ints(const std::vector<int>& values) {
    std::string text;
    for (size_t i = 0; i < values.size(); ++i) {
        if (i > 0) text += ',';
        text += std::to_string(values[i]);
    }
    return text;
}

}  // namespace

std::string parse_int_value(const std::string& text, int min, int max, int* value) {
    long long parsed = 0;
    const char* begin = text.data();
    const char* end = text.data() + text.size();
    const auto [stop, error] = std::from_chars(begin, end, parsed);
    if (text.empty() || error == std::errc::invalid_argument) return in_quotes(text) + " is not a whole number";
    if (error == std::errc::result_out_of_range || parsed > INT_MAX || parsed < INT_MIN) {
        return in_quotes(text) + " is out of range (at most " + std::to_string(max) + ")";
    }
    if (stop != end)
        return in_quotes(text) + " is not a whole number (unexpected " + in_quotes(std::string(stop, end)) + ")";
    if (parsed < min || parsed > max) {
        return in_quotes(text) + " is out of range: expected " + std::to_string(min) + ".." + std::to_string(max);
    }
    *value = static_cast<int>(parsed);
    return "";
}

std::string parse_uint64_value(const std::string& text, uint64_t* value) {
    uint64_t parsed = 0;
    const char* end = text.data() + text.size();
    const auto [stop, error] = std::from_chars(text.data(), end, parsed);
    if (text.empty() || error == std::errc::invalid_argument) {
        return in_quotes(text) + " is not a non-negative whole number";
    }
    if (error == std::errc::result_out_of_range) return in_quotes(text) + " is out of range (at most 2^64-1)";
    if (stop != end) {
        return in_quotes(text) + " is not a non-negative whole number (unexpected " +
               in_quotes(std::string(stop, end)) + ")";
    }
    *value = parsed;
    return "";
}

std::string parse_double_value(const std::string& text, double min, double max, bool min_inclusive, double* value) {
    double parsed = 0;
    const char* end = text.data() + text.size();
    const auto [stop, error] = std::from_chars(text.data(), end, parsed);
    if (text.empty() || error == std::errc::invalid_argument) return in_quotes(text) + " is not a number";
    if (error == std::errc::result_out_of_range || !std::isfinite(parsed)) return in_quotes(text) + " is out of range";
    if (stop != end) return in_quotes(text) + " is not a number (unexpected " + in_quotes(std::string(stop, end)) + ")";
    const bool below = min_inclusive ? parsed < min : parsed <= min;
    if (below || parsed > max) {
        return in_quotes(text) + " is out of range: expected " + (min_inclusive ? "" : "more than ") +
               format_double(min) + (min_inclusive ? " to " : " and at most ") + format_double(max);
    }
    *value = parsed;
    return "";
}

std::string parse_int_list_value(const std::string& text, int min, int max, std::vector<int>* value) {
    if (text.empty()) return "'' is not a list of whole numbers (expected e.g. 1024,1024)";
    std::vector<int> parsed;
    size_t start = 0;
    while (true) {
        const size_t comma = text.find(',', start);
        const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        int number = 0;
        if (const std::string error = parse_int_value(item, min, max, &number); !error.empty()) {
            return "in list " + in_quotes(text) + ": " + error;
        }
        parsed.push_back(number);
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    *value = parsed;
    return "";
}

Cli::Cli(std::string program, std::string summary, TrainOptions& options)
    : program_(std::move(program)), summary_(std::move(summary)), options_(options) {
    TrainOptions& o = options_;
    add_int("--epochs", &o.epochs, "N", "passes over the training set", 1, 100000);
    add_int("--batch", &o.batch, "N", "images per training step (the last batch of an epoch may be smaller)", 1,
            1 << 24);
    add_int_list("--hidden", &o.hidden, "LIST", "hidden layer widths, e.g. 1024,1024 (784 -> LIST -> 10)", 1, 1 << 16);
    add(Flag{"--optimizer", "NAME", "sgd (with momentum) or adamw", optimizer_name(o.optimizer), true,
             [&o](const std::string& v) -> std::string {
                 if (v == "sgd")
                     o.optimizer = OptimizerKind::sgd;
                 else if (v == "adamw")
                     o.optimizer = OptimizerKind::adamw;
                 else
                     return in_quotes(v) + " is not an optimizer: expected sgd or adamw";
                 return "";
             }});
    add(Flag{"--lr", "X", "learning rate", format_double(o.lr) + "; adamw: " + format_double(o.adamw_lr), true,
             [&o](const std::string& v) { return parse_double_value(v, 0.0, 1e6, false, &o.lr); }});
    add_double("--momentum", &o.momentum, "X", "sgd momentum", 0.0, 0.999999);
    add(Flag{"--weight-decay", "X", "weight decay (sgd: L2 added to the gradient; adamw: decoupled)",
             format_double(o.weight_decay) + "; adamw: " + format_double(o.adamw_weight_decay), true,
             [&o](const std::string& v) { return parse_double_value(v, 0.0, 1e3, true, &o.weight_decay); }});
    add(Flag{"--seed", "N", "random seed: initial weights and batch order (Philox)", std::to_string(o.seed), true,
             [&o](const std::string& v) { return parse_uint64_value(v, &o.seed); }});
    add_string("--data", &o.data_dir, "DIR", "directory with the MNIST IDX files (default: search, see mnist.h)");
    add(Flag{"--limit", "N", "use only the first N training images (the test set stays whole)", "all", true,
             [&o](const std::string& v) {
                 int n = 0;
                 const std::string error = parse_int_value(v, 1, INT_MAX, &n);
                 if (error.empty()) o.limit = static_cast<size_t>(n);
                 return error;
             }});
    // Checked now, not after training: a typo in the directory should cost seconds, not the whole run.
    add(Flag{"--json", "FILE", "also write everything printed as JSON to FILE", "", true,
             [&o](const std::string& v) -> std::string {
                 if (v.empty()) return "an empty value";
                 if (const std::string problem = check_output_file(v); !problem.empty()) return problem;
                 o.json_path = v;
                 return "";
             }});
    add_flag("--quiet", &o.quiet, "no progress bar");
}

void Cli::add(Flag flag) {
    for (Flag& existing : flags_) {
        if (existing.name == flag.name) {  // a lesson may redefine a shared flag (e.g. other limits)
            existing = std::move(flag);
            return;
        }
    }
    flags_.push_back(std::move(flag));
}

void Cli::add_int(const std::string& flag, int* target, const std::string& metavar, const std::string& help, int min,
                  int max) {
    add(Flag{flag, metavar, help, std::to_string(*target), true,
             [=](const std::string& v) { return parse_int_value(v, min, max, target); }});
}

void Cli::add_double(const std::string& flag, double* target, const std::string& metavar, const std::string& help,
                     double min, double max, bool min_inclusive) {
    add(Flag{flag, metavar, help, format_double(*target), true,
             [=](const std::string& v) { return parse_double_value(v, min, max, min_inclusive, target); }});
}

void Cli::add_int_list(const std::string& flag, std::vector<int>* target, const std::string& metavar,
                       const std::string& help, int min, int max) {
    add(Flag{flag, metavar, help, join_ints(*target), true,
             [=](const std::string& v) { return parse_int_list_value(v, min, max, target); }});
}

void Cli::add_string(const std::string& flag, std::string* target, const std::string& metavar,
                     const std::string& help) {
    add(Flag{flag, metavar, help, target->empty() ? "" : *target, true, [=](const std::string& v) -> std::string {
                 if (v.empty()) return "an empty value";
                 *target = v;
                 return "";
             }});
}

void Cli::add_flag(const std::string& flag, bool* target, const std::string& help) {
    add(Flag{flag, "", help, "", false, [=](const std::string&) {
                 *target = true;
                 return std::string();
             }});
}

CliResult Cli::parse(int argc, const char* const* argv) {
    const auto error = [](std::string message) { return CliResult{CliResult::Kind::error, 2, std::move(message)}; };
    given_.clear();
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        if (arg == "--help" || arg == "-h") return CliResult{CliResult::Kind::help, 0, usage()};
        if (arg.rfind("--", 0) != 0) return error("unexpected argument " + in_quotes(arg) + " (flags start with --)");
        std::string value;
        bool has_value = false;
        if (const size_t eq = arg.find('='); eq != std::string::npos) {
            value = arg.substr(eq + 1);
            arg = arg.substr(0, eq);
            has_value = true;
        }
        const Flag* flag = nullptr;
        for (const Flag& candidate : flags_) {
            if (candidate.name == arg) flag = &candidate;
        }
        if (flag == nullptr) return error("unknown flag " + in_quotes(arg));
        if (!flag->takes_value) {
            if (has_value) return error(arg + " takes no value");
        } else if (!has_value) {
            // The next argument is the value, unless there is none or it is another flag ("--data --epochs 3").
            if (i + 1 >= argc || std::string(argv[i + 1]).rfind("--", 0) == 0) {
                return error(arg + " needs a value (" + flag->metavar + ")");
            }
            value = argv[++i];
        }
        if (const std::string problem = flag->set(value); !problem.empty()) return error(arg + ": " + problem);
        given_.push_back(arg);
    }
    // Defaults that depend on the optimizer, unless given explicitly.
    if (options_.optimizer == OptimizerKind::adamw) {
        if (!given("--lr")) options_.lr = options_.adamw_lr;
        if (!given("--weight-decay")) options_.weight_decay = options_.adamw_weight_decay;
    }
    return CliResult{};
}

void Cli::parse_or_exit(int argc, char** argv) {
    const CliResult result = parse(argc, argv);
    if (result.kind == CliResult::Kind::help) {
        std::fputs(result.message.c_str(), stdout);
        std::exit(0);
    }
    if (result.kind == CliResult::Kind::error) {
        std::fprintf(stderr, "%s: %s\nRun '%s --help' for the list of flags.\n", program_.c_str(),
                     result.message.c_str(), program_.c_str());
        std::exit(result.exit_code);
    }
}

std::string Cli::usage() const {
    std::ostringstream out;
    out << "usage: " << program_ << " [flags]\n";
    if (!summary_.empty()) out << summary_ << "\n";
    out << "\nflags:\n";
    size_t width = 0;
    std::vector<std::string> lefts;
    for (const Flag& flag : flags_) {
        lefts.push_back(flag.name + (flag.takes_value ? " " + flag.metavar : ""));
        width = std::max(width, lefts.back().size());
    }
    for (size_t i = 0; i < flags_.size(); ++i) {
        out << "  " << lefts[i] << std::string(width - lefts[i].size() + 2, ' ') << flags_[i].help;
        if (!flags_[i].default_text.empty()) out << " (default " << flags_[i].default_text << ")";
        out << "\n";
    }
    out << "  --help" << std::string(width > 6 ? width - 6 + 2 : 2, ' ') << "print this and exit\n";
    return out.str();
}

bool Cli::given(const std::string& flag) const {
    for (const std::string& name : given_) {
        if (name == flag) return true;
    }
    return false;
}

std::string check_output_file(const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code ignored;
    if (fs::is_directory(path, ignored)) return in_quotes(path) + " is a directory, expected a file name";
    const fs::path parent = fs::path(path).parent_path();
    if (!parent.empty() && !fs::is_directory(parent, ignored)) {
        return "cannot write " + in_quotes(path) + ": directory " + in_quotes(parent.string()) + " does not exist";
    }
    // The file is written as FILE.tmp and renamed, so that is what must be creatable. Opening for append
    // truncates nothing; a .tmp this check created is removed again.
    const std::string temporary = path + ".tmp";
    const bool existed = fs::exists(temporary, ignored);
    std::FILE* probe = std::fopen(temporary.c_str(), "ab");
    if (probe == nullptr) return "cannot write " + in_quotes(path) + " (cannot create " + in_quotes(temporary) + ")";
    std::fclose(probe);
    if (!existed) fs::remove(temporary, ignored);
    return "";
}

std::string check_batch_fits(int batch, size_t train_count) {
    if (batch <= 0) return "--batch " + std::to_string(batch) + ": expected at least 1";
    if (static_cast<size_t>(batch) > train_count) {
        return "--batch " + std::to_string(batch) + " is larger than the training set (" + std::to_string(train_count) +
               " images" + "); use a smaller --batch or a larger --limit";
    }
    return "";
}

void require_batch_fits_or_exit(const char* program, int batch, size_t train_count) {
    if (const std::string error = check_batch_fits(batch, train_count); !error.empty()) {
        std::fprintf(stderr, "%s: %s\n", program, error.c_str());
        std::exit(2);
    }
}
