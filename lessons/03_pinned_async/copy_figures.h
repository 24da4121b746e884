// lessons/03_pinned_async/copy_figures.h — the two figures lesson 03's idea is judged by (lessons 04 and 08 print
// them too): how fast the bus is from pageable and from pinned memory, and how much of the copy time the compute
// stream never saw.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lessons/lesson.h"

// Prints host→device bandwidth from pageable and from pinned memory, at `batch_bytes` and at 64 MiB (as NVIDIA's
// bandwidthTest does), timed with CUDA events: the ceiling a data path can reach. Its buffers are its own (not in the
// lesson's tables). The 64 MiB pinned figure becomes the h2d phase's limit in the final table; all go into the JSON.
void print_h2d_bandwidth_probe(Lesson& lesson, size_t batch_bytes);

// After training: the image bytes copied per epoch, and how much of the copy time (timer's h2d) the compute stream
// never waited for (its input wait): printed and in the JSON results. Without overlapping streams (the CPU backend
// without CUDA_CPU_ASYNC=1) it says that this cannot be measured there.
void report_copies(Lesson& lesson, const PhaseTimer& timer, uint64_t image_bytes_per_epoch, bool resident);
