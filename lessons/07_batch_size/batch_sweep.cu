// lessons/07_batch_size/batch_sweep.cu — see batch_sweep.h.
#include "lessons/07_batch_size/batch_sweep.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common/reference_mlp.h"  // batch_count
#include "kernels/bias_grad.cuh"
#include "kernels/loss_scaling.cuh"

void SweepFlags::add(Cli& cli) {
    cli.add_int_list("--batches", &batches, "LIST",
                     "the batch sizes to compare (those above the training images are skipped)");
    cli.add_int("--samples", &samples, "N",
                "training samples at each batch size (default: one pass over the training images)", 0);
    cli.add_choice("--lr-scaling", &lr_scaling, {"sqrt", "linear", "none"},
                   "the learning rate at batch B: lr·√(B/128), lr·B/128, or lr");
    cli.add_flag("--no-largest", &skip_largest, "do not find, allocate and step the largest batch that fits");
    cli.mark_unused("--epochs", "each batch size trains on --samples samples");
}

long SweepFlags::samples_or_all(Lesson& lesson) const {
    const long all = samples > 0 ? samples : long(lesson.data.train.count);
    lesson.add_config("samples_per_batch_size", int64_t(all));
    lesson.add_config("lr_scaling", lr_scaling);
    return all;
}

SweepPoint sweep_point(const Lesson& lesson, int batch, double lr, long steps, const EpochTiming& timing) {
    const size_t per_epoch = batch_count(lesson.data.train.count, batch);
    SweepPoint point;
    point.batch = batch;
    point.lr = lr;
    point.steps = steps;
    for (long i = 0; i < steps; ++i) {
        point.samples +=
            long(std::min<size_t>(batch, lesson.data.train.count - (size_t(i) % per_epoch) * size_t(batch)));
    }
    point.wall_ms = timing.wall_ms;
    point.copy_ms = timing[Phase::h2d].ms / steps;
    point.wait_ms = timing[Phase::input_wait].ms / steps;
    point.host_ms = timing[Phase::host].ms / steps;
    for (const Phase p : {Phase::normalize, Phase::forward, Phase::loss, Phase::backward, Phase::optimizer}) {
        point.compute_ms += timing[p].ms / steps;
    }
    return point;
}

void prove_largest_batch(Lesson& lesson, int largest, const std::string& lr_scaling, const TrainAt& train_at) {
    MemoryLedger proof_ledger;  // freed on return
    PhaseTimer proof_timer;
    const long proof_samples = long(std::min<size_t>(size_t(largest), lesson.data.train.count));
    const SweepPoint p = train_at(lesson, largest, proof_samples, scaled_lr(lesson.options.lr, largest, lr_scaling),
                                  proof_ledger, proof_timer, nullptr);
    const size_t peak = p.memory.total[int(MemorySpace::device)].peak;
    std::printf("the largest batch, %d, allocated and stepped: %s of device memory at its peak\n", largest,
                format_bytes(peak).c_str());
    lesson.add_result("largest_batch_peak_device_bytes", int64_t(peak));
}

size_t extra_device_bytes(const Lesson& lesson, int batch, long steps) {
    return bias_grad_workspace_floats(batch, lesson.options.widest_layer()) * sizeof(float) + sizeof(GradScalerState) +
           size_t(steps) * sizeof(float) + 64;
}

ModelShape shape_at(const Lesson& lesson, int batch) {
    ModelShape shape = half_model_shape(lesson, Precision::mixed, BatchPipeline::kSlots);
    shape.batch = batch;
    return shape;
}

double scaled_lr(double lr, int batch, const std::string& rule) {
    if (rule == "sqrt") return lr * std::sqrt(batch / 128.0);
    if (rule == "linear") return lr * (batch / 128.0);
    return lr;
}

void set_cpu_backend_device_memory() {
#if defined(CUDA_TEACH_CPU)
    setenv("CUDA_CPU_MEMORY", "256M", 0);  // an explicit one wins
#endif
}

int largest_batch_that_fits_or_print(Lesson& lesson, long samples) {
    const TrainOptions& o = lesson.options;
    const long main_steps = long(cuda_teach::ceil_div<size_t>(size_t(samples), size_t(o.batch)));
    lesson.require_fits(shape_at(lesson, o.batch), extra_device_bytes(lesson, o.batch, main_steps));
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const size_t usable = usable_device_bytes(free_bytes, total_bytes);
    const int largest = largest_batch_that_fits(shape_at(lesson, 1), extra_device_bytes(lesson, 1 << 20, 1 << 20),
                                                usable, max_indexable_batch(o.layer_sizes()));
    char line[480];
    std::snprintf(line, sizeof line,
                  "device memory: %s free of %s, %s usable after the margin (1/32 of the total + up to 64 MiB, for "
                  "the CUDA context and allocator rounding)%s\nthe largest batch that fits: %d (the ledger's "
                  "prediction; activations and input staging grow with the batch)\n"
                  "each batch size trains on the same %ld samples (--samples)\n\n",
                  format_bytes(free_bytes).c_str(), format_bytes(total_bytes).c_str(), format_bytes(usable).c_str(),
                  lesson.on_cpu_backend() ? " — CPU backend: emulated capacity (CUDA_CPU_MEMORY)" : "", largest,
                  samples);
    print_flushed(line);
    return largest;
}

void run_sweep(Lesson& lesson, const std::vector<int>& batches, int largest, long samples,
               const std::string& lr_scaling, const TrainAt& train_at) {
    const TrainOptions& o = lesson.options;
    const long samples_flag = samples;
    char line[480];
    std::vector<int> sweep;
    for (const int b : batches) {
        if (size_t(b) > lesson.data.train.count || b > largest) continue;  // said in the README and below
        sweep.push_back(b);
    }
    if (std::find(sweep.begin(), sweep.end(), o.batch) == sweep.end()) sweep.push_back(o.batch);  // finish()'s run
    std::sort(sweep.begin(), sweep.end());
    sweep.erase(std::unique(sweep.begin(), sweep.end()), sweep.end());
    TextTable table({"batch", "lr", "steps", "samples/s", "ms/step", "copy", "kernels", "input wait", "host",
                     "peak memory", "activations", "test acc"},
                    "rrrrrrrrrrrr");
    std::vector<RunReport::Row> rows;
    for (const int b : sweep) {
        MemoryLedger point_ledger;
        PhaseTimer point_timer;
        const bool is_main = b == o.batch;
        MemoryLedger& ledger = is_main ? lesson.ledger : point_ledger;
        PhaseTimer& timer = is_main ? lesson.timer : point_timer;
        std::vector<std::vector<float>> parameters;
        const SweepPoint p = train_at(lesson, b, samples_flag, scaled_lr(o.lr, b, lr_scaling), ledger, timer,
                                      is_main ? &parameters : nullptr);
        if (is_main) {  // finish()'s run: its weights and its accuracy are the lesson's result
            lesson.set_final_parameters(std::move(parameters));
            lesson.set_final_test_accuracy(p.test_accuracy);
        }
        const double samples_per_s = p.wall_ms > 0 ? 1000.0 * double(p.samples) / p.wall_ms : 0.0;
        const double ms_per_step = p.wall_ms / double(p.steps);
        const size_t peak = p.memory.total[int(MemorySpace::device)].peak;
        const size_t activations = p.memory.usage(MemorySpace::device, MemoryCategory::activations).peak;
        table.add_row({std::to_string(b), fixed(p.lr, 5), std::to_string(p.steps), fixed(samples_per_s, 0),
                       fixed(ms_per_step, 3), fixed(p.copy_ms, 3), fixed(p.compute_ms, 3), fixed(p.wait_ms, 3),
                       fixed(p.host_ms, 3), format_bytes(peak), format_bytes(activations),
                       fixed(100.0 * p.test_accuracy, 2) + "%"});
        rows.push_back({{"batch", int64_t(b)},
                        {"lr", p.lr},
                        {"steps", int64_t(p.steps)},
                        {"samples_per_second", samples_per_s},
                        {"ms_per_step", ms_per_step},
                        {"copy_ms_per_step", p.copy_ms},
                        {"compute_ms_per_step", p.compute_ms},
                        {"input_wait_ms_per_step", p.wait_ms},
                        {"host_gap_ms_per_step", p.host_ms},
                        {"peak_device_bytes", int64_t(peak)},
                        {"activation_peak_bytes", int64_t(activations)},
                        {"test_accuracy", p.test_accuracy}});
        std::snprintf(line, sizeof line, "batch %5d: %8.0f samples/s, test %.2f%%\n", b, samples_per_s,
                      100.0 * p.test_accuracy);
        print_flushed(line);
    }
    std::string sweep_text = "\n";  // appended piece by piece (g++ 12's -Wrestrict misreads "literal" + string)
    sweep_text += std::to_string(samples_flag) + " training samples at each batch size (";
    sweep_text += lesson.on_cpu_backend() ? "CPU timings" : "CUDA events";
    sweep_text +=
        "; per step: copy on the copy stream, kernels on the compute stream, input wait = the compute stream waiting "
        "for its copy, host = the host's own work per step):\n";
    print_flushed(sweep_text + table.render());
    lesson.add_result("batch_sweep", rows);
    lesson.add_result("largest_batch_that_fits", int64_t(largest));
}
