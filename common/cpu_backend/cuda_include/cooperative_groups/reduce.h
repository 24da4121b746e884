// <cooperative_groups/reduce.h> for the cpu flavor: cg::reduce and its operators are in ../../cooperative_groups.h.
#pragma once
#include "../../cooperative_groups.h"
