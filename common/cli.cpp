// common/cli.cpp — see cli.h. CLI11 parses; what is here is the flags themselves, and the checks CLI11 2.1's own
// number conversion does not make.
#include "common/cli.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <numbers>
#include <ranges>
#include <type_traits>
#include <utility>

#include <CLI/CLI.hpp>

const char* optimizer_name(OptimizerKind kind) {
    return kind == OptimizerKind::adamw ? "adamw" : "sgd";
}

const char* lr_schedule_name(LrSchedule schedule) {
    return schedule == LrSchedule::cosine ? "cosine" : "constant";
}

std::vector<int> TrainOptions::layer_sizes() const {
    std::vector<int> sizes{784};
    sizes.insert(sizes.end(), hidden.begin(), hidden.end());
    sizes.push_back(10);
    return sizes;
}

int TrainOptions::widest_layer() const {
    int widest = 10;
    for (const int width : hidden) widest = std::max(widest, width);
    return widest;
}

double scheduled_lr(LrSchedule schedule, double lr, long step, long total_steps) {
    if (schedule == LrSchedule::constant || total_steps <= 0) return lr;
    const double progress = double(std::clamp(step, 0L, total_steps)) / double(total_steps);
    return lr * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

double scheduled_lr(const TrainOptions& options, long step, long total_steps) {
    return scheduled_lr(options.lr_schedule, options.lr, step, total_steps);
}

namespace {

std::string in_quotes(const std::string& text) {
    return "'" + text + "'";
}

std::string to_text(double value) {
    char text[64];
    std::snprintf(text, sizeof text, "%g", value);
    return text;
}

template <typename Integer>
std::string to_text(Integer value) {
    return std::to_string(value);
}

std::string join(const std::vector<std::string>& items, const std::string& separator) {
    std::string text;
    for (const std::string& item : items) text += (text.empty() ? "" : separator) + item;
    return text;
}

std::string join_ints(const std::vector<int>& values) {
    std::vector<std::string> items;
    for (const int value : values) items.push_back(std::to_string(value));
    return join(items, ",");
}

// A value that starts with "--" is the next flag: CLI11 would take it as this flag's value ("--data --epochs 3").
CLI::Validator a_value(const std::string& metavar) {
    return CLI::Validator(
        [metavar](std::string& text) -> std::string {
            if (text.empty()) return "expected " + metavar + ", got an empty value";
            if (text.starts_with("--")) return "expected " + metavar + ", got the flag " + in_quotes(text);
            return "";
        },
        "", "a value");
}

// CLI11 2.1 converts numbers with strtoll/strtoull/strtold, which also read " 7", "+7", "0x10", "010" (as octal
// 8), "-1" for an unsigned (as 2^64-1), "nan" and "inf", and saturate past the type's range. std::from_chars reads
// plain decimal only, so with this check first a typo is an error instead of a different number. Integers are
// handed on in canonical form ("010" → "10").
template <typename Number>
CLI::Validator number_in_range(Number min, Number max, bool min_inclusive = true) {
    return CLI::Validator(
        [=](std::string& text) -> std::string {
            const char* kind = std::is_floating_point_v<Number> ? " is not a number"
                               : std::is_unsigned_v<Number>     ? " is not a non-negative whole number"
                                                                : " is not a whole number";
            Number value{};
            const char* end = text.data() + text.size();
            const auto [stop, error] = std::from_chars(text.data(), end, value);
            if (error == std::errc::invalid_argument || stop != end) return in_quotes(text) + kind;
            if (error == std::errc::result_out_of_range) return in_quotes(text) + " is out of range";
            if constexpr (std::is_floating_point_v<Number>) {
                if (!std::isfinite(value)) return in_quotes(text) + " is not a finite number";
            }
            if ((min_inclusive ? value < min : value <= min) || value > max) {
                const std::string lowest = (min_inclusive ? "at least " : "more than ") + to_text(min);
                const std::string range = max == std::numeric_limits<Number>::max() ? lowest
                                          : std::is_integral_v<Number>              ? to_text(min) + ".." + to_text(max)
                                                                       : lowest + " and at most " + to_text(max);
                return in_quotes(text) + " is out of range: expected " + range;
            }
            if constexpr (std::is_integral_v<Number>) text = std::to_string(value);
            return "";
        },
        "", "number");
}

// "1024,512": each item checked by `item_check`, so "1024," and "1,,2" are errors, not a shorter list.
CLI::Validator list_of(CLI::Validator item_check) {
    return CLI::Validator(
        [item_check](std::string& text) -> std::string {
            std::vector<std::string> items;
            for (const auto piece : std::views::split(text, ',')) {
                std::string item(piece.begin(), piece.end());
                if (std::string problem = item_check(item); !problem.empty()) {
                    if (item.empty()) problem = "an empty item";
                    return text.find(',') == std::string::npos ? problem
                                                               : "in list " + in_quotes(text) + ": " + problem;
                }
                items.push_back(item);
            }
            text = join(items, ",");
            return "";
        },
        "", "list");
}

CLI::Validator one_of(const std::vector<std::string>& choices) {
    return CLI::Validator(
        [choices](std::string& text) -> std::string {
            if (std::find(choices.begin(), choices.end(), text) != choices.end()) return "";
            return in_quotes(text) + " is not one of: " + join(choices, ", ");
        },
        "", "choice");
}

std::string with_default(const std::string& help, const std::string& default_text) {
    return default_text.empty() ? help : help + " (default " + default_text + ")";
}

// A lesson may redefine a shared flag (e.g. with other limits); CLI11 refuses a name twice.
CLI::App& without(CLI::App& app, const std::string& flag) {
    if (CLI::Option* existing = app.get_option_no_throw(flag)) app.remove_option(existing);
    return app;
}

// Every flag that takes a value: shown as "FLAG METAVAR"; CLI11 runs a_value(), then `check`, then stores the value.
// trigger_on_parse: CLI11 checks and stores each flag the moment it reads it, so an error is about the first bad
// flag on the line, the last of a repeated flag counts, and --help (a flag whose callback throws) wins over what
// follows it.
CLI::Option* takes_value(CLI::Option* option, const std::string& metavar, const CLI::Validator& check) {
    // transform() puts a validator in front of the others: they run in the reverse of the order added here.
    return option->type_name(metavar)->trigger_on_parse()->transform(check)->transform(a_value(metavar));
}

// A flag bound to `target`: CLI11 converts the text once it has passed the checks.
template <typename Target>
void add_value(CLI::App& app, const std::string& flag, Target& target, const std::string& metavar,
               const std::string& help, const std::string& default_text, const CLI::Validator& check) {
    takes_value(without(app, flag).add_option(flag, target, with_default(help, default_text)), metavar, check);
}

// A flag whose value is one of `names`, stored as the matching enum value.
template <typename Enum>
void add_enum(CLI::App& app, const std::string& flag, Enum& target,
              const std::vector<std::pair<std::string, Enum>>& names, const std::string& help) {
    std::vector<std::string> choices;
    std::string default_name;
    for (const auto& [name, value] : names) {
        choices.push_back(name);
        if (value == target) default_name = name;
    }
    const auto store = [&target, names](const std::string& chosen) {
        for (const auto& [name, value] : names) {
            if (name == chosen) target = value;
        }
    };
    takes_value(without(app, flag).add_option_function<std::string>(flag, store, with_default(help, default_name)),
                join(choices, "|"), one_of(choices));
}

}  // namespace

Cli::Cli(std::string program, std::string summary, TrainOptions& options)
    : program_(std::move(program)), options_(options), app_(std::make_unique<CLI::App>(std::move(summary), program_)) {
    CLI::App& app = *app_;
    app.allow_extras();  // so that parse() names the first unknown flag itself, in one line
    // CLI11's own --help is handled after every other flag has been checked; this one wins wherever it is.
    app.set_help_flag();
    const auto show_help = [] { throw CLI::CallForHelp(); };  // parse() turns it into CliResult::Kind::help
    app.add_flag_callback("-h,--help", show_help, "print this and exit")->trigger_on_parse();

    TrainOptions& o = options_;
    add_int("--epochs", &o.epochs, "N", "passes over the training set", 1, 100000);
    add_int("--batch", &o.batch, "N", "images per training step (the last batch of an epoch may be smaller)", 1,
            1 << 24);
    add_int_list("--hidden", &o.hidden, "LIST", "hidden layer widths, e.g. 1024,1024 (784 -> LIST -> 10)", 1, 1 << 16);
    add_enum(app, "--optimizer", o.optimizer, {{"sgd", OptimizerKind::sgd}, {"adamw", OptimizerKind::adamw}},
             "sgd (with momentum) or adamw");
    add_value(app, "--lr", o.lr, "X", "learning rate", to_text(o.lr) + "; adamw: " + to_text(o.adamw_lr),
              number_in_range(0.0, 1e6, false));
    add_enum(app, "--lr-schedule", o.lr_schedule, {{"constant", LrSchedule::constant}, {"cosine", LrSchedule::cosine}},
             "learning-rate schedule: constant, or cosine decay from --lr to 0 over the whole run");
    add_double("--momentum", &o.momentum, "X", "sgd momentum", 0.0, 0.999999);
    add_value(app, "--weight-decay", o.weight_decay, "X",
              "weight decay (sgd: L2 added to the gradient; adamw: decoupled)",
              to_text(o.weight_decay) + "; adamw: " + to_text(o.adamw_weight_decay), number_in_range(0.0, 1e3));
    add_value(app, "--seed", o.seed, "N", "random seed: initial weights and batch order (Philox)", to_text(o.seed),
              number_in_range<uint64_t>(0, UINT64_MAX));
    add_string("--data", &o.data_dir, "DIR", "directory with the MNIST IDX files (default: search, see mnist.h)");
    add_value(app, "--limit", o.limit, "N", "train on only the first N training images (see --test-limit)",
              o.limit == 0 ? "all" : to_text(o.limit), number_in_range<size_t>(1, SIZE_MAX));
    add_value(app, "--test-limit", o.test_limit, "N", "evaluate on only the first N test images; 0 = all",
              to_text(o.test_limit), number_in_range<size_t>(0, SIZE_MAX));
    // Checked now, not after training: a typo in the directory should cost seconds, not the whole run.
    add_value(app, "--json", o.json_path, "FILE", "also write everything printed as JSON to FILE", "",
              CLI::Validator([](std::string& path) { return check_output_file(path); }, "", "output file"));
    add_flag("--quiet", &o.quiet, "no progress bar");
}

Cli::~Cli() = default;

void Cli::add_int(const std::string& flag, int* target, const std::string& metavar, const std::string& help, int min,
                  int max) {
    add_value(*app_, flag, *target, metavar, help, to_text(*target), number_in_range(min, max));
}

void Cli::add_double(const std::string& flag, double* target, const std::string& metavar, const std::string& help,
                     double min, double max, bool min_inclusive) {
    add_value(*app_, flag, *target, metavar, help, to_text(*target), number_in_range(min, max, min_inclusive));
}

void Cli::add_int_list(const std::string& flag, std::vector<int>* target, const std::string& metavar,
                       const std::string& help, int min, int max) {
    // Bound as one string, not as CLI11's vector with a delimiter: that would drop empty items ("1024,").
    const auto store = [target](const std::string& text) {
        target->clear();
        for (const std::string& item : CLI::detail::split(text, ',')) target->push_back(std::stoi(item));
    };
    takes_value(
        without(*app_, flag).add_option_function<std::string>(flag, store, with_default(help, join_ints(*target))),
        metavar, list_of(number_in_range(min, max)));
}

void Cli::add_string(const std::string& flag, std::string* target, const std::string& metavar,
                     const std::string& help) {
    add_value(*app_, flag, *target, metavar, help, *target, CLI::Validator());  // a_value() refuses "" and flags
}

void Cli::add_output_file(const std::string& flag, std::string* target, const std::string& metavar,
                          const std::string& help) {
    add_value(*app_, flag, *target, metavar, help, "",
              CLI::Validator([](std::string& path) { return check_output_file(path); }, "", "output file"));
}

void Cli::add_flag(const std::string& flag, bool* target, const std::string& help) {
    // CLI11 would read "--quiet=no" as false, and "--quiet=yes" as true: a flag here takes no value at all.
    const CLI::Validator no_value(
        [](std::string& text) {
            return text == "true" ? std::string() : "takes no value (got " + in_quotes(text) + ")";
        },
        "", "no value");
    without(*app_, flag).add_flag(flag, *target, help)->trigger_on_parse()->check(no_value);
}

void Cli::add_choice(const std::string& flag, std::string* target, const std::vector<std::string>& choices,
                     const std::string& help) {
    add_value(*app_, flag, *target, join(choices, "|"), help, *target, one_of(choices));
}

CliResult Cli::parse(int argc, const char* const* argv) {
    const auto error = [](std::string message) { return CliResult{CliResult::Kind::error, 2, std::move(message)}; };
    try {
        app_->parse(argc, argv);
    } catch (const CLI::CallForHelp&) {
        return CliResult{CliResult::Kind::help, 0, usage()};
    } catch (const CLI::ParseError& failure) {
        return error(failure.what());
    }
    if (const std::vector<std::string> extras = app_->remaining(); !extras.empty()) {
        const std::string& first = extras.front();
        if (first.starts_with("-")) return error("unknown flag " + in_quotes(first.substr(0, first.find('='))));
        return error("unexpected argument " + in_quotes(first) + " (flags start with --)");
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
    // Laid out here rather than by CLI11's formatter, whose layout changes from one release to the next.
    std::vector<std::pair<std::string, std::string>> rows;  // "--flag METAVAR", its help with the default
    size_t width = 0;
    for (const CLI::Option* option : app_->get_options()) {
        std::string flag = option->get_name(false, true);
        if (option->get_type_size() != 0) flag += " " + option->get_type_name();
        width = std::max(width, flag.size());
        rows.emplace_back(flag, option->get_description());
    }
    const std::string& summary = app_->get_description();
    std::string text = "usage: " + program_ + " [flags]\n" + (summary.empty() ? "" : summary + "\n") + "\nflags:\n";
    for (const auto& [flag, help] : rows) text += "  " + flag + std::string(width - flag.size() + 2, ' ') + help + "\n";
    return text;
}

void Cli::mark_unused(const std::string& flag, const std::string& why) {
    CLI::Option* option = app_->get_option(flag);  // throws for a flag the Cli does not have: a programming error
    option->description("not used here: " + why);
    unused_[flag] = why;
}

bool Cli::given(const std::string& flag) const {
    const CLI::Option* option = app_->get_option_no_throw(flag);
    return option != nullptr && option->count() > 0;
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
               " images); use a smaller --batch or a larger --limit";
    }
    return "";
}

void require_batch_fits_or_exit(const char* program, int batch, size_t train_count) {
    if (const std::string error = check_batch_fits(batch, train_count); !error.empty()) {
        std::fprintf(stderr, "%s: %s\n", program, error.c_str());
        std::exit(2);
    }
}
