// <cooperative_groups.h> for the cpu flavor: cooperative groups on the CPU backend (../cooperative_groups.h).
#pragma once
#include "../cooperative_groups.h"
