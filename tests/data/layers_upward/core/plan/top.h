#pragma once
// The top layer may include anything below it.
#include "core/util/bad.h"
