// tools/reference.cpp — the `reference` executable: trains the MLP on MNIST on the CPU in float64, with the same
// initialization, batch order, report and JSON as the lessons. Its accuracy is what a correct lesson reaches.
//
//     build/cpu/tools/reference                                       # 784-256-10, 3 epochs, SGD momentum (defaults)
//     build/cpu/tools/reference --optimizer adamw --json reference.json
//     build/cpu/tools/reference --limit 2000 --epochs 1               # a few seconds
//
// Exit codes: 0 success; 1 a failure while running (data unreadable, out of memory, JSON not written); 2 bad flags
// or a model too large for this machine (refused before allocating anything).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <new>

#include "common/cli.h"
#include "common/mnist.h"
#include "common/phase_timer.h"
#include "common/reference_mlp.h"
#include "common/report.h"

namespace {

// Refuse models above this many bytes even on a machine with more memory: one float64 thread needs hours per
// epoch long before that, so a bigger --hidden is a typo rather than an experiment.
constexpr double kFixedCapBytes = 32.0 * (1ull << 30);

double physical_memory_bytes() {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? double(pages) * double(page) : 0.0;
}

std::string gib(double bytes) {
    char text[64];
    std::snprintf(text, sizeof text, "%.2f GiB", bytes / double(1ull << 30));
    return text;
}

// The model's memory from its shape, before anything is allocated: exits 2 with one message if it is above the
// cap (the smaller of kFixedCapBytes and 3/4 of physical memory, leaving room for the data and the system).
void require_model_fits_or_exit(const char* program, const ReferenceConfig& config) {
    double parameters = 0;
    for (size_t l = 0; l + 1 < config.layer_sizes.size(); ++l) {
        parameters += double(config.layer_sizes[l]) * config.layer_sizes[l + 1] + config.layer_sizes[l + 1];
    }
    // + the float32 initial values the constructor converts from.
    const double needed = ReferenceMlp::predicted_bytes(config) + 4.0 * parameters;
    const double physical = physical_memory_bytes();
    const double cap = physical > 0 ? std::min(kFixedCapBytes, 0.75 * physical) : kFixedCapBytes;
    if (needed <= cap) return;
    std::fprintf(stderr,
                 "%s: the model needs about %s (%.0f parameters in float64: values, gradients, optimizer state; "
                 "plus activations for --batch %d), more than the limit of %s (the smaller of %s and 3/4 of this "
                 "machine's %s); use smaller --hidden or --batch\n",
                 program, gib(needed).c_str(), parameters, config.batch, gib(cap).c_str(), gib(kFixedCapBytes).c_str(),
                 gib(physical).c_str());
    std::exit(2);
}

int run(int argc, char** argv) {
    const char* program = "reference";
    TrainOptions options;  // the shared defaults: 784-256-10, batch 128, SGD lr 0.05 momentum 0.9, 3 epochs
    Cli cli(program,
            "Trains an MLP on MNIST on the CPU in float64 (plain C++, one thread): the reference a lesson's loss\n"
            "and accuracy are compared with. Same Philox initialization and batch order as the lessons.",
            options);
    bool augment = false;
    cli.add_flag("--augment", &augment,
                 "augment every training image as lesson 08 does (random affine: common/augment.h), from the same "
                 "Philox(seed, epoch, sample) parameters");
    cli.parse_or_exit(argc, argv);  // also checks that --json FILE can be written
    require_model_fits_or_exit(program, ReferenceConfig::from_options(options, 0));

    const MnistDataset data = load_mnist_or_exit(program, options.data_dir, options.limit, options.test_limit);
    require_batch_fits_or_exit(program, options.batch, data.train.count);
    ReferenceConfig config = ReferenceConfig::from_options(options, data.train.count);
    config.augment = augment;

    const std::string device = "CPU reference: float64, one thread (no GPU, no CPU backend)";
    std::printf("%s\n%s\n%s%s\n", device.c_str(), data.describe().c_str(), format_config(options).c_str(),
                augment ? ", every training image augmented (random affine, as lesson 08)" : "");
    RunReport report(program);
    report.set_device(device);
    report.set_data(data.describe());
    report.add_options(options);
    report.add_config("augment", augment);

    ReferenceMlp model(config);
    PhaseTimer timer(TimerClock::host);
    double test_accuracy = 0;
    std::vector<double> step_losses;  // every step's loss, for comparing a lesson with the reference step by step
    for (int epoch = 1; epoch <= options.epochs; ++epoch) {
        ProgressBar progress("epoch " + std::to_string(epoch), batch_count(data.train.count, options.batch),
                             !options.quiet);
        timer.begin_epoch(epoch);
        const EpochResult result = model.train_epoch(data.train, epoch, &timer, &progress);
        const EpochTiming& timing = timer.end_epoch();
        progress.finish();
        step_losses.insert(step_losses.end(), result.step_losses.begin(), result.step_losses.end());
        test_accuracy = model.evaluate(data.test);  // the whole test set unless --test-limit

        EpochMetrics metrics;
        metrics.epoch = epoch;
        metrics.epochs = options.epochs;
        metrics.train_loss = result.mean_loss;
        metrics.train_accuracy = result.train_accuracy;
        metrics.test_accuracy = test_accuracy;
        metrics.seconds = timing.wall_ms / 1000.0;
        metrics.samples_per_second = metrics.seconds > 0 ? double(result.samples) / metrics.seconds : 0.0;
        std::printf("%s\n", epoch_line(metrics).c_str());
        std::fflush(stdout);
        report.add_epoch(metrics, timing);
    }

    const MemorySnapshot memory = model.memory().snapshot();
    std::printf("\n%s", timing_table(timer.total(), "time per phase, all epochs").c_str());
    std::printf("\n%s", memory_table(memory).c_str());
    report.set_memory(memory);
    report.add_result("final_test_accuracy", test_accuracy);
    report.add_result("step_losses", step_losses);
    report.write_json_or_exit(options.json_path);
    if (!options.json_path.empty()) std::printf("\nwrote %s\n", options.json_path.c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    // Whatever escapes (an allocation that fails despite the check above, a bug) becomes one line and exit 1,
    // not std::terminate's abort.
    try {
        return run(argc, argv);
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "reference: out of memory (std::bad_alloc); try a smaller --hidden or --batch\n");
    } catch (const std::exception& error) {
        std::fprintf(stderr, "reference: %s\n", error.what());
    }
    return 1;
}
