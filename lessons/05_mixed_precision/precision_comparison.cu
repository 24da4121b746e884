// lessons/05_mixed_precision/precision_comparison.cu — see precision_comparison.h.
#include "lessons/05_mixed_precision/precision_comparison.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

// Prints the scale changes the device logged since the last call, and the running count of skipped steps.
void print_scaler_news(MemoryLedger& ledger, const GradScalerState* device_state, int* changes_printed,
                       cudaStream_t stream) {
    GradScalerState state;
    ledger.copy_to_host(&state, device_state, sizeof state, stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));  // pageable destination
    std::string text;
    const int logged = std::min(state.change_count, kGradScalerLogSize);
    for (int i = *changes_printed; i < logged; ++i) {
        const ScaleChange& c = state.changes[i];
        char line[160];
        std::snprintf(line, sizeof line, "  loss scale %g → %g at step %d (%s)\n", c.old_scale, c.new_scale,
                      c.iteration + 1, c.grew ? "2000 clean steps in a row: grow" : "inf/NaN gradient: step skipped");
        text += line;
    }
    *changes_printed = logged;
    char line[160];
    std::snprintf(line, sizeof line, "  loss scale now %g; steps skipped so far: %d%s\n", state.scale,
                  state.skipped_steps, state.change_count > logged ? " (more changes than the log keeps)" : "");
    print_flushed(text + line);
}

UpdateCounters allocate_update_counters(MemoryLedger& ledger, cudaStream_t stream) {
    const UpdateCounters counters{ledger.allocate<unsigned long long>(MemoryCategory::workspace, "update counters", 2)};
    CUDA_CHECK(cudaMemsetAsync(counters.device, 0, 2 * sizeof(unsigned long long), stream));
    return counters;
}

void finish_precision_run(PrecisionRun& run, Lesson& lesson, bool main_run, MemoryLedger& ledger,
                          std::vector<std::vector<float>> parameters, UpdateCounters counters,
                          const GradScalerState* scaler, const GradScalerOptions& scaling,
                          const std::vector<float>& step_losses, cudaStream_t stream) {
    unsigned long long counts[2];
    ledger.copy_to_host(counts, counters.device, sizeof counts, stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    run.updates = counts[0];
    run.stalled = counts[1];
    if (scaler != nullptr) {
        GradScalerState state;
        ledger.copy_to_host(&state, scaler, sizeof state, stream);
        CUDA_CHECK(cudaStreamSynchronize(stream));
        run.skipped_steps = state.skipped_steps;
        run.final_scale = state.scale;
    }
    // The underflow probe: this run's final weights, the first test batch, gradients in fp32 and in fp16.
    const int probe_rows = int(std::min<size_t>(lesson.options.batch, lesson.data.test.count));
    const float probe_scale = run.precision == Precision::mixed ? run.final_scale : float(scaling.init_scale);
    run.probe = probe_gradient_underflow(lesson, parameters, lesson.test_pixels(), lesson.test_labels(), probe_rows,
                                         probe_scale, stream);
    if (main_run) {
        lesson.add_series("step_losses", std::vector<double>(step_losses.begin(), step_losses.end()));
        lesson.set_final_parameters(std::move(parameters));
    }
    run.memory = ledger.snapshot();
}

namespace {

// The model's own memory (what precision changes); input staging and workspace are the same for every run.
constexpr MemoryCategory kModelCategories[] = {MemoryCategory::parameters, MemoryCategory::gradients,
                                               MemoryCategory::optimizer_state, MemoryCategory::master_weights,
                                               MemoryCategory::activations};

// With `decimals` decimals, or two significant digits where those would show a nonzero share as 0 (0.00041%).
std::string percent(double fraction, int decimals = 2) {
    const double value = 100.0 * fraction;
    char text[32];
    if (value != 0 && std::fabs(value) < 0.5 * std::pow(10.0, -decimals)) {
        std::snprintf(text, sizeof text, "%.2g%%", value);
    } else {
        std::snprintf(text, sizeof text, "%.*f%%", decimals, value);
    }
    return text;
}

// The runs side by side: what each precision costs in accuracy, lost updates and lost gradients, time and memory.
void print_comparison(Lesson& lesson, const std::vector<PrecisionRun>& runs) {
    TextTable table({"precision", "test acc", "train loss", "updates rounded away", "fp16 grads → 0 (no scaling)",
                     "(× scale)", "skipped steps", "s/epoch"},
                    "lrrrrrrr");
    std::vector<RunReport::Row> rows;
    for (const PrecisionRun& r : runs) {
        const double stalled = r.updates > 0 ? double(r.stalled) / double(r.updates) : 0.0;
        char scale[48], seconds[32];
        std::snprintf(scale, sizeof scale, "%s (×%g)", percent(r.probe.scaled, 3).c_str(), r.probe.scale);
        std::snprintf(seconds, sizeof seconds, "%.2f", r.seconds / lesson.options.epochs);
        table.add_row({precision_name(r.precision), percent(r.last.test_accuracy),
                       std::to_string(r.last.train_loss).substr(0, 6), percent(stalled, 3),
                       percent(r.probe.unscaled, 3), scale,
                       r.precision == Precision::mixed ? std::to_string(r.skipped_steps) : "-", seconds});
        size_t model_peak = 0;
        for (const MemoryCategory c : kModelCategories) model_peak += r.memory.usage(MemorySpace::device, c).peak;
        rows.push_back({{"mode", std::string(precision_name(r.precision))},
                        {"test_accuracy", r.last.test_accuracy},
                        {"final_train_loss", r.last.train_loss},
                        {"stalled_update_fraction", stalled},
                        {"underflow_fraction_unscaled", r.probe.unscaled},
                        {"underflow_fraction_scaled", r.probe.scaled},
                        {"overflow_fraction_scaled", r.probe.overflowed_scaled},
                        {"probe_scale", double(r.probe.scale)},
                        {"skipped_steps", int64_t(r.skipped_steps)},
                        {"seconds_per_epoch", r.seconds / lesson.options.epochs},
                        {"peak_device_bytes", int64_t(model_peak)}});
    }
    print_flushed(
        "\nthe precisions side by side (same seed, same batches" +
        std::string(lesson.on_cpu_backend() ? "; CPU timings" : "") + "):\n" + table.render() +
        "  updates rounded away: of the weight updates that change the weight in fp32, the fraction that left\n"
        "    the stored weight unchanged: fp16 storage rounded them away (every 10th step counted; 0 by\n"
        "    construction where the optimizer stores fp32: fp32 and mixed).\n"
        "  fp16 grads → 0: on the first test batch, with the run's final weights, of the weight and bias\n"
        "    gradient elements that are non-zero in fp32, the fraction that are zero in fp16, without and\n"
        "    with the loss scale.\n");

    // Memory by category: the halving of parameters and activations, and what the master weights add back.
    std::vector<std::string> headers = {"category"};
    std::string align = "l";
    for (const PrecisionRun& r : runs) headers.push_back(precision_name(r.precision)), align += 'r';
    TextTable memory(headers, align);
    std::vector<size_t> sums(runs.size(), 0);
    for (const MemoryCategory c : kModelCategories) {
        std::vector<std::string> cells = {memory_category_name(c)};
        for (size_t i = 0; i < runs.size(); ++i) {
            const size_t peak = runs[i].memory.usage(MemorySpace::device, c).peak;
            cells.push_back(format_bytes(peak));
            sums[i] += peak;
        }
        memory.add_row(cells);
    }
    memory.add_rule();
    std::vector<std::string> total = {"total"};
    for (const size_t sum : sums) total.push_back(format_bytes(sum));
    memory.add_row(total);
    print_flushed("\npeak device memory of the model, by category:\n" + memory.render());
    lesson.add_result("precision_runs", rows);
}

}  // namespace

void run_precisions(Lesson& lesson, const std::string& precision_flag, const TrainPrecision& train) {
    std::vector<PrecisionRun> runs;
    if (precision_flag == "all") {  // the three comparisons first, each in its own buffers; mixed last, in full
        for (const Precision p : {Precision::fp32, Precision::fp16_pure, Precision::fp16_weights}) {
            print_flushed(std::string("--- ").append(precision_name(p)).append(" (for comparison)\n"));
            MemoryLedger side_ledger;  // a comparison run's buffers: its own table, freed before the next run
            PhaseTimer side_timer;
            lesson.set_run_label(precision_name(p));
            runs.push_back(train(p, false, side_ledger, side_timer));
        }
        print_flushed("--- mixed (the lesson's recipe)\n");
    }
    lesson.set_run_label("");
    const Precision main = precision_flag == "all" ? Precision::mixed : precision_from_name(precision_flag);
    runs.push_back(train(main, true, lesson.ledger, lesson.timer));
    print_comparison(lesson, runs);
}
