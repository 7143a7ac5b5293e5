#pragma once
// A util header that reaches up to the plan layer: core/layers.cmake must refuse it.
#include "core/plan/top.h"
